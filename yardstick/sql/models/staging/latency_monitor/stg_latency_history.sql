/* One row per collection, event and sample of the batch (LATENCY HISTORY from the cursor on,
   stg_latency_latest.history_landed_from: the cursor's sample recurs, and every sample in
   files before the cursor existed). */
select run_id, env, server_run_id, event, sampled_at, latency_ms,
from {{ source('lake', 'raw_latency_history') }}
