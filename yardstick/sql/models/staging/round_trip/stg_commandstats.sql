/* INFO commandstats snapshots around the PING windows: one row per run, window, phase
   (before | after) and command (batch only). */
with source as (
    select * from {{ source('lake', 'raw_commandstats') }}
)

select
    run_id, env, window_idx, phase, taken_at, command, calls, usec, failed_calls,
    rejected_calls,
from source
