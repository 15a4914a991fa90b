/* SLOWLOG over time. Entries are deduplicated by (server run id, entry id) per environment;
   a collection's lost entries are the ids skipped since the previous collection of the same
   server run (a restart starts a new series: no false losses), minus ids the tool's own
   scratch experiments produced; the entry rate over the last 24 hours and slowlog-max-len
   give the collection interval that loses nothing. */
create or replace table slowlog_entries_dedup as
/* Each entry once, attributed to the collection that saw it first. */
select *
from stg_slowlog_entries
qualify row_number() over (
    partition by env, server_run_id, entry_id order by collected_at, run_id
) = 1;

create or replace table slowlog_collection_gaps as
with ids as (
    select run_id, env, min(entry_id) as min_id, max(entry_id) as max_id, count(*) as entries,
    from stg_slowlog_entries
    group by run_id, env
),

collections as (
    select c.*, i.min_id, i.max_id, coalesce(i.entries, 0) as entries,
    from stg_slowlog_collections as c
    left join ids as i on i.run_id = c.run_id and i.env = c.env
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
    join stg_experiment_spans as s on s.server_run_id = r.server_run_id
    where r.known_max_id is not null and s.last_entry_id is not null
    group by r.run_id, r.env
),

new_entries as (
    select
        run_id,
        env,
        count(*) as new_entries,
        count(*) filter (measurement_caused) as new_tool_entries,
    from slowlog_entries_dedup
    group by run_id, env
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
left join new_entries as n on n.run_id = r.run_id and n.env = r.env;

create or replace table slowlog_rates as
/* Per collection: the last 24 hours of collections of this environment, up to it. */
with windowed as (
    select
        r.run_id,
        r.env,
        sum(p.ids_logged) filter (p.ids_logged is not null and p.interval_s > 0) as ids_24h,
        sum(p.interval_s) filter (p.ids_logged is not null and p.interval_s > 0)
            as observed_s,
        sum(p.lost_entries) as lost_24h,
        count(p.run_id) as collections_24h,
        median(p.gap_since_previous_s) as median_gap_s,
    from slowlog_collection_gaps as r
    join slowlog_collection_gaps as p
        on p.env = r.env
        and p.collected_at <= r.collected_at
        and p.collected_at > r.collected_at - interval 24 hour
    group by r.run_id, r.env
),

rates as (
    select
        w.*,
        g.slowlog_max_len,
        60.0 * w.ids_24h / nullif(w.observed_s, 0) as entries_per_min,
    from windowed as w
    join slowlog_collection_gaps as g on g.run_id = w.run_id and g.env = w.env
)

select
    *,
    slowlog_max_len / nullif(entries_per_min, 0) as fill_min,
    /* Twice per fill time, so a burst at double the average rate still fits; at most hourly,
       and every minute is the floor (below that, only a longer queue helps). */
    case
        when entries_per_min is null then null
        when entries_per_min = 0 then 60
        else least(60, greatest(1, floor(slowlog_max_len / entries_per_min / 2)))
    end as recommended_interval_min,
    coalesce(slowlog_max_len / nullif(entries_per_min, 0) < 2, false) as collection_cannot_keep_up,
from rates;

insert into figure_catalog values
    ('slowlog_entries_new', 'slowlog', 260, 'entries', 'absolute',
     'traffic, thresholds and collection times of this server', null,
     'SLOWLOG entries first seen by this collection (deduplicated by server run and entry id)'),
    ('slowlog_entries_lost', 'slowlog', 261, 'entries', 'absolute',
     'traffic, thresholds and collection times of this server', 'lower',
     'entries the queue dropped before this collection read them (ids skipped since the '
     || 'previous collection of the same server run, scratch experiments excluded)'),
    ('slowlog_lost_share', 'slowlog', 262, 'share', 'ratio', null, 'lower',
     'lost ÷ (lost + new) in this collection'),
    ('slowlog_tool_share', 'slowlog', 263, 'share', 'ratio', null, null,
     'share of new entries sent by the tool''s own named connections (diagnostics, not traffic)'),
    ('slowlog_entries_per_min', 'slowlog', 264, 'entries/min', 'absolute',
     'traffic and thresholds of this server', null,
     'entries logged per minute over the last 24 h, kept or lost (from entry ids)'),
    ('slowlog_fill_min', 'slowlog', 265, 'min', 'absolute',
     'traffic and thresholds of this server', 'higher',
     'minutes until slowlog-max-len entries at that rate: older entries are forgotten'),
    ('slowlog_recommended_interval_min', 'slowlog', 266, 'min', 'absolute',
     'traffic and thresholds of this server', null,
     'collect at least this often: half the fill time, between 1 and 60 minutes'),
    ('slowlog_collection_gap_min', 'slowlog', 267, 'min', 'absolute',
     'the collection schedule of this environment', null,
     'minutes since the previous collection of this environment'),
    ('slowlog_lost_24h', 'slowlog', 268, 'entries', 'absolute',
     'traffic, thresholds and collection times of this server', 'lower',
     'entries lost over the collections of the last 24 h');

insert into measures by name
with g as (
    select * from slowlog_collection_gaps
),

r as (
    select * from slowlog_rates
),

long as (
    select run_id, env, 'slowlog_entries_new' as figure, new_entries as value,
           new_entries as samples
    from g
    union all
    select run_id, env, 'slowlog_entries_lost', lost_entries, null from g
    union all
    select run_id, env, 'slowlog_lost_share',
           lost_entries / nullif(lost_entries + new_entries, 0), lost_entries + new_entries
    from g
    union all
    select run_id, env, 'slowlog_tool_share',
           new_tool_entries / nullif(new_entries, 0), new_entries
    from g
    union all
    select run_id, env, 'slowlog_collection_gap_min', gap_since_previous_s / 60, null from g
    union all
    select run_id, env, 'slowlog_entries_per_min', entries_per_min, ids_24h from r
    union all
    select run_id, env, 'slowlog_fill_min', fill_min, null from r
    union all
    select run_id, env, 'slowlog_recommended_interval_min', recommended_interval_min, null
    from r
    union all
    select run_id, env, 'slowlog_lost_24h', lost_24h, collections_24h from r
)

select run_id, env, figure, null::int as window_idx, value, samples from long;

create or replace view report_slowlog as
/* One row per collection: what the section's sentences are made of. */
select
    g.*,
    r.entries_per_min,
    r.fill_min,
    r.recommended_interval_min,
    r.collection_cannot_keep_up,
    r.lost_24h,
    r.collections_24h,
    r.median_gap_s / 60 as median_gap_min,
from slowlog_collection_gaps as g
left join slowlog_rates as r on r.run_id = g.run_id and r.env = g.env;

create or replace view report_slowlog_commands as
/* Entries per command over the last 24 h, application traffic apart from the tool's own. */
select
    g.run_id,
    g.env,
    e.command,
    count(*) filter (not e.measurement_caused) as app_entries,
    count(*) filter (e.measurement_caused) as tool_entries,
    median(e.duration_us) as median_us,
    max(e.duration_us) as max_us,
from slowlog_collection_gaps as g
join slowlog_entries_dedup as e
    on e.env = g.env
    and e.collected_at <= g.collected_at
    and e.collected_at > g.collected_at - interval 24 hour
group by g.run_id, g.env, e.command
order by g.run_id, g.env, app_entries desc, tool_entries desc, e.command;

create or replace view report_slowlog_slowest as
/* The ten slowest entries of the last 24 h, as landed (arguments redacted by default). */
select
    g.run_id,
    g.env,
    e.logged_at,
    e.duration_us,
    e.command,
    array_to_string(e.args, ' ') as args,
    e.client_name,
    e.measurement_caused,
from slowlog_collection_gaps as g
join slowlog_entries_dedup as e
    on e.env = g.env
    and e.collected_at <= g.collected_at
    and e.collected_at > g.collected_at - interval 24 hour
qualify row_number() over (
    partition by g.run_id, g.env order by e.duration_us desc, e.entry_id desc
) <= 10
order by g.run_id, g.env, e.duration_us desc;
