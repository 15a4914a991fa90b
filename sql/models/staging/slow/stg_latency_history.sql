/* One row per collection, event and sample of the batch (LATENCY HISTORY: samples recur
   across collections). */
select run_id, env, server_run_id, event, sampled_at, latency_ms,
from {{ source('lake', 'raw_latency_history') }}
