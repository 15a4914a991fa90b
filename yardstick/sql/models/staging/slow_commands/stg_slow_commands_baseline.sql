/* One row per run, phase (before | after) and command of the GET baseline's counters. */
select run_id, env, phase, command, taken_at, calls_sent, calls, usec,
from {{ source('lake', 'raw_slow_commands_baseline') }}
