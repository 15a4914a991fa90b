/* One row per run and SLOWLOG entry the contention loop left. */
select run_id, env, entry_id, command, client_name, duration_us,
from {{ source('lake', 'raw_contention_slowlog') }}
