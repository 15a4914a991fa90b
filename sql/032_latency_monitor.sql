/* Latency monitor: stalls the SLOWLOG cannot see (fork, AOF fsync, expiry). History samples
   are deduplicated per server run, event and second; samples taken while a scratch experiment
   ran are the tool's. A threshold of 0 is a finding: the monitor records nothing. */
create or replace table latency_samples as
with deduped as (
    select env, server_run_id, event, sampled_at, max(latency_ms) as latency_ms,
           min(run_id) as first_run_id,
    from stg_latency_history
    group by env, server_run_id, event, sampled_at
)

select
    d.*,
    /* A second of a scratch experiment (one second of slack for clock rounding). */
    exists (
        select 1 from stg_experiment_spans as s
        where s.server_run_id = d.server_run_id  /* any environment on that server */
            and d.sampled_at between s.started_at - interval 1 second
                and s.finished_at + interval 1 second
    ) as measurement_caused,
from deduped as d;

insert into figure_catalog values
    ('latency_worst_ms', 'latency_monitor', 280, 'ms', 'absolute',
     'workload, persistence settings and host of this server', 'lower',
     'worst stall the latency monitor holds, any event (all-time max since restart or reset)'),
    ('latency_spikes_24h', 'latency_monitor', 281, 'samples', 'absolute',
     'workload, persistence settings and host of this server', 'lower',
     'seconds with a recorded stall over the last 24 h, the tool''s experiments excluded'),
    ('latency_monitor_threshold_ms', 'latency_monitor', 282, 'ms', 'absolute',
     'this server''s configuration', null,
     'latency-monitor-threshold: stalls shorter than this are not recorded; 0 = monitor off');

insert into measures by name
with latest as (
    select run_id, env, max(max_ms) as worst_ms, count(*) as events,
    from stg_latency_latest
    group by run_id, env
),

spikes as (
    select c.run_id, c.env, count(s.sampled_at) as spikes,
    from stg_latency_collections as c
    left join latency_samples as s
        on s.env = c.env
        and not s.measurement_caused
        and s.sampled_at <= c.collected_at
        and s.sampled_at > c.collected_at - interval 24 hour
    group by c.run_id, c.env
)

select run_id, env, 'latency_worst_ms' as figure, worst_ms as value, events as samples
from latest
union all
select s.run_id, s.env, 'latency_spikes_24h', s.spikes, null
from spikes as s
join stg_latency_collections as c on c.run_id = s.run_id and c.env = s.env
where c.error is null
union all
select run_id, env, 'latency_monitor_threshold_ms', threshold_ms, null
from stg_latency_collections;

create or replace view report_latency_monitor as
select
    run_id,
    env,
    collected_at,
    threshold_ms,
    threshold_ms = 0 as monitor_off,
    threshold_ms is null as threshold_unknown,
    error,
    events,
    doctor_text,
from stg_latency_collections;

create or replace view report_latency_events as
/* Each event's latest spike and all-time worst, with its last 24 h of samples. */
select
    l.run_id,
    l.env,
    l.event,
    l.latest_at,
    l.latest_ms,
    l.max_ms,
    count(s.sampled_at) as samples_24h,
    count(s.sampled_at) filter (s.measurement_caused) as tool_samples_24h,
    max(s.latency_ms) filter (not s.measurement_caused) as worst_app_24h_ms,
from stg_latency_latest as l
join stg_latency_collections as c on c.run_id = l.run_id and c.env = l.env
left join latency_samples as s
    on s.env = l.env
    and s.event = l.event
    and s.server_run_id = l.server_run_id
    and s.sampled_at <= c.collected_at
    and s.sampled_at > c.collected_at - interval 24 hour
group by all
order by l.run_id, l.env, l.max_ms desc;
