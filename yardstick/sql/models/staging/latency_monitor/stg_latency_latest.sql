/* One row per collection and latency event of the batch (LATENCY LATEST), with where its
   history was landed from (null: all of it) and its newest sample read. */
select run_id, env, server_run_id, event, latest_at, latest_ms, max_ms, history_landed_from,
       history_newest_at,
from {{ source('lake', 'raw_latency_latest') }}
