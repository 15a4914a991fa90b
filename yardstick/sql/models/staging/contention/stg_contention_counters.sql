/* One row per run, phase (before | after the loop) and command of the batch. */
select run_id, env, phase, taken_at, command, calls, usec,
from {{ source('lake', 'raw_contention_counters') }}
