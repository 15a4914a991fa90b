/* One row per latency-monitor collection (a run and environment) of the batch. */
select run_id, env, server_run_id, collected_at, threshold_ms, events, doctor_text, error,
from {{ source('lake', 'raw_latency_collections') }}
