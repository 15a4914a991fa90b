/* Up to ten rows per collection (run, environment): the slowest entries of
   the 24 h before it, as landed (arguments redacted by default). */
select
    e.run_id,
    e.env,
    e.logged_at,
    e.duration_us,
    e.command,
    array_to_string(e.args, ' ') as args,
    e.client_name,
    e.measurement_caused,
from {{ ref('slowlog_entries_24h') }} as e
qualify row_number() over (
    partition by e.run_id, e.env order by e.duration_us desc, e.entry_id desc
) <= 10
order by e.run_id, e.env, e.duration_us desc
