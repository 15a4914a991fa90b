/* One row per SLOWLOG collection (run, environment). Its lost entries are the ids skipped since
   the previous collection of the same server run (a restart starts a new series: no false
   losses), minus ids the tool's own scratch experiments produced. The previous collection
   comes from the batch or, for the batch's first one, from the state slowlog_server_runs. */
{% set prior = prior_relation('slowlog_server_runs') %}

with ids as (
    select run_id, env, min(entry_id) as min_id, max(entry_id) as max_id, count(*) as entries,
    from {{ ref('stg_slowlog_entries') }}
    group by run_id, env
),

fresh as (
    select c.*, i.min_id, i.max_id, coalesce(i.entries, 0) as entries, false as is_prior,
    from {{ ref('stg_slowlog_collections') }} as c
    left join ids as i on i.run_id = c.run_id and i.env = c.env
),

prior as (
    /* Each server run's latest collection of earlier updates, with the highest id seen. */
    {% if is_incremental() and prior %}
    select
        p.last_run_id as run_id,
        p.env,
        p.server_run_id,
        p.last_collected_at as collected_at,
        p.max_id,
        true as is_prior,
    from {{ prior }} as p
    where p.env in (select env from fresh)
    {% else %}
    select run_id, env, server_run_id, collected_at, max_id, is_prior, from fresh where false
    {% endif %}
),

collections as (
    select * from prior
    union all by name
    select * from fresh
),

ordered as (
    select
        *,
        /* Highest id any earlier collection of this server run has seen. */
        max(max_id) over (
            partition by env, server_run_id order by collected_at, run_id
            rows between unbounded preceding and 1 preceding
        ) as known_max_id,
        lag(collected_at) over (
            partition by env, server_run_id order by collected_at, run_id
        ) as prev_same_server_at,
        lag(collected_at) over (partition by env order by collected_at, run_id)
            as prev_collected_at,
    from collections
),

ranges as (
    select
        *,
        /* Ids nobody read: after the last known id, before the oldest one still queued. */
        known_max_id + 1 as gap_first_id,
        min_id - 1 as gap_last_id,
        case when known_max_id is not null and min_id is not null
            then greatest(0, min_id - known_max_id - 1) end as gap_ids,
        /* Ids logged since the previous collection, kept or lost (an empty log adds none). */
        case when known_max_id is not null
            then greatest(coalesce(max_id, known_max_id), known_max_id) - known_max_id
        end as ids_logged,
    from ordered
    where not is_prior
),

span_overlap as (
    /* Ids a scratch experiment produced belong to the tool, not to the application. */
    select
        r.run_id,
        r.env,
        sum(greatest(0, least(r.gap_last_id, s.last_entry_id)
            - greatest(r.gap_first_id, s.first_entry_id) + 1)) as gap_experiment_ids,
        sum(greatest(0, least(r.known_max_id + r.ids_logged, s.last_entry_id)
            - greatest(r.known_max_id + 1, s.first_entry_id) + 1)) as logged_experiment_ids,
    from ranges as r
    /* Matched by server, not environment: another environment naming the same server
       sees the experiment's ids too (server run ids are unique across servers). */
    join {{ ref('experiment_spans') }} as s on s.server_run_id = r.server_run_id
    where r.known_max_id is not null and s.last_entry_id is not null
    group by r.run_id, r.env
),

new_entries as (
    select
        d.run_id,
        d.env,
        count(*) as new_entries,
        count(*) filter (d.measurement_caused) as new_tool_entries,
    from {{ ref('slowlog_entries_dedup') }} as d
    semi join fresh as c on c.run_id = d.run_id and c.env = d.env
    group by d.run_id, d.env
)

select
    r.run_id,
    r.env,
    r.server_run_id,
    r.redis_version,
    r.collected_at,
    r.slowlog_len,
    r.slowlog_max_len,
    r.log_slower_than_us,
    r.args_redacted,
    r.entries as entries_returned,
    r.min_id,
    r.max_id,
    r.known_max_id,
    coalesce(n.new_entries, 0) as new_entries,
    coalesce(n.new_tool_entries, 0) as new_tool_entries,
    /* null: no earlier id of this server run to count from (first collection, restart) */
    r.gap_ids - coalesce(o.gap_experiment_ids, 0) as lost_entries,
    coalesce(o.gap_experiment_ids, 0) as lost_experiment_ids,
    r.ids_logged - coalesce(o.logged_experiment_ids, 0) as ids_logged,
    epoch(r.collected_at) - epoch(r.prev_same_server_at) as interval_s,
    epoch(r.collected_at) - epoch(r.prev_collected_at) as gap_since_previous_s,
from ranges as r
left join span_overlap as o on o.run_id = r.run_id and o.env = r.env
left join new_entries as n on n.run_id = r.run_id and n.env = r.env
