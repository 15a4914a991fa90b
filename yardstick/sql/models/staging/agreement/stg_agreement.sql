/* One row per run and repetition of the instrument agreement SORT. */
select run_id, env, server_run_id, rep_idx, list_len, client_us, entry_id, slowlog_us, logged_at,
       latency_ms, latency_sampled_at, latency_threshold_ms, latency_threshold_before_ms,
       measured_at,
from {{ source('lake', 'raw_agreement') }}
