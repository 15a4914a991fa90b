/* One row per commandstats snapshot (a run and environment) and command of the batch. */
select run_id, env, server_run_id, uptime_s, taken_at, command, calls, usec,
       rejected_calls, failed_calls,
from {{ source('lake', 'raw_commandstats_snapshots') }}
