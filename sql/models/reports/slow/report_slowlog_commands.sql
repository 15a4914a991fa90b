/* One row per collection of the last update (run, environment) and command: entries over the
   24 h before it, application traffic apart from the tool's own (from a time-bounded slice of
   slowlog_entries_dedup). */
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
    e.command,
    count(*) filter (not e.measurement_caused) as app_entries,
    count(*) filter (e.measurement_caused) as tool_entries,
    median(e.duration_us) as median_us,
    max(e.duration_us) as max_us,
from batch as g
join recent as e
    on e.env = g.env
    and e.collected_at <= g.collected_at
    and e.collected_at > g.collected_at - interval 24 hour
group by g.run_id, g.env, e.command
order by g.run_id, g.env, app_entries desc, tool_entries desc, e.command
