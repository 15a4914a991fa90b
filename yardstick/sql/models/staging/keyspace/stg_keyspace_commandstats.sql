/* One row per run, phase (before | after the scan) and command of the scan's own commands. */
select run_id, env, phase, command, calls, usec, failed_calls,
from {{ source('lake', 'raw_keyspace_commandstats') }}
