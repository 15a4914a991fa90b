/* The latency_monitor family's measures: one row per batch run, environment and figure. A
   threshold of 0 is a finding: the monitor records nothing. Spikes over the last 24 h come
   from a time-bounded slice of latency_samples. */
{{ config(materialized='ephemeral') }}

with collections as (
    select * from {{ ref('stg_latency_collections') }}
),

latest as (
    select run_id, env, max(max_ms) as worst_ms, count(*) as events,
    from {{ ref('stg_latency_latest') }}
    group by run_id, env
),

recent_samples as (
    select *
    from {{ ref('latency_samples') }}
    where not measurement_caused
        and sampled_at > (select min(collected_at) from collections) - interval 24 hour
),

spikes as (
    select c.run_id, c.env, count(s.sampled_at) as spikes,
    from collections as c
    left join recent_samples as s
        on s.env = c.env
        and s.sampled_at <= c.collected_at
        and s.sampled_at > c.collected_at - interval 24 hour
    group by c.run_id, c.env
),

long as (
    select run_id, env, 'latency_worst_ms' as figure, worst_ms as value, events as samples
    from latest
    union all
    select s.run_id, s.env, 'latency_spikes_24h', s.spikes, null
    from spikes as s
    join collections as c on c.run_id = s.run_id and c.env = s.env
    where c.error is null
    union all
    select run_id, env, 'latency_monitor_threshold_ms', threshold_ms, null
    from collections
)

{{ as_measures('long') }}
