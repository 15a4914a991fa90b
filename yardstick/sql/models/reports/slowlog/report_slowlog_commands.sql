/* One row per collection (run, environment) and command: entries over the
   24 h before it, application traffic apart from the tool's own (from a time-bounded slice of
   slowlog_entries_dedup). */
select
    e.run_id,
    e.env,
    e.command,
    count(*) filter (where not e.measurement_caused) as app_entries,
    count(*) filter (where e.measurement_caused) as tool_entries,
    median(e.duration_us) as median_us,
    max(e.duration_us) as max_us,
from {{ ref('slowlog_entries_24h') }} as e
group by e.run_id, e.env, e.command
order by e.run_id, e.env, app_entries desc, tool_entries desc, e.command
