/* Up to ten rows per collection of the last update (run, environment): the slowest entries of
   the 24 h before it, as landed (arguments redacted by default). */
with batch as (
    select g.*
    from {{ ref('slowlog_collection_gaps') }} as g
    semi join {{ source('lake', 'batch_runs') }} as b on b.run_id = g.run_id and b.env = g.env
),

recent as (
    select *
    from {{ ref('slowlog_entries_dedup') }}
    where collected_at > (select min(collected_at) from batch) - interval 24 hour
)

select
    g.run_id,
    g.env,
    e.logged_at,
    e.duration_us,
    e.command,
    array_to_string(e.args, ' ') as args,
    e.client_name,
    e.measurement_caused,
from batch as g
join recent as e
    on e.env = g.env
    and e.collected_at <= g.collected_at
    and e.collected_at > g.collected_at - interval 24 hour
qualify row_number() over (
    partition by g.run_id, g.env order by e.duration_us desc, e.entry_id desc
) <= 10
order by g.run_id, g.env, e.duration_us desc
