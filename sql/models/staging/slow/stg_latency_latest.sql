/* One row per collection and latency event of the batch (LATENCY LATEST). */
select run_id, env, server_run_id, event, latest_at, latest_ms, max_ms,
from {{ source('lake', 'raw_latency_latest') }}
