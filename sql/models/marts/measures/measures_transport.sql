/* Transport overhead, one row per run, figure, side and round (null: the run): one server
   reached directly and through another path, interleaved in one run; ratios pair the two
   sides of the same round. */
{{ config(materialized='ephemeral') }}

with sides as (
    select run_id, env, round, side, rtt_mean_us, rps, samples from {{ ref('stg_transport') }}
    union all
    /* Ordered float means: the same bits on every build. */
    select run_id, env, null, side, avg(rtt_mean_us order by round), avg(rps order by round),
           sum(samples)
    from {{ ref('stg_transport') }}
    group by run_id, env, side
),

paired as (
    select
        f.run_id, f.env, f.round,
        f.rtt_mean_us / nullif(d.rtt_mean_us, 0) as rtt_ratio,
        f.rps / nullif(d.rps, 0) as rps_ratio,
        f.samples + d.samples as samples,
    from sides as f
    join sides as d
        on d.run_id = f.run_id and d.env = f.env
        and d.round is not distinct from f.round and d.side = 'direct'
    where f.side = 'forwarded'
),

measured as (
    select run_id, env, 'transport_rtt_mean_us' as figure, side as subject,
           round as window_idx, rtt_mean_us as value, samples
    from sides
    union all
    select run_id, env, 'transport_rps', side, round, rps, null from sides
    where rps is not null
    union all
    select run_id, env, 'transport_rtt_ratio', '', round, rtt_ratio, samples from paired
    union all
    select run_id, env, 'transport_rps_ratio', '', round, rps_ratio, null from paired
    where rps_ratio is not null
    union all
    select run_id, env, 'transport_rps_lost_share', '', round, 1 - rps_ratio, null from paired
    where rps_ratio is not null
)

{{ as_measures('measured', subject='subject', window_idx='window_idx') }}
