/* Transport overhead, one row per run, figure, side and round (null: the run): one server
   reached directly and through another path, interleaved in one run; ratios pair the two
   sides of the same round. The run's value is the median over rounds (of the paired ratios
   for the ratios), the statistic the report's table shows as median: a mean of each side
   taken before dividing would let one slow round move the headline. */
{{ config(materialized='ephemeral') }}

with rounds as (
    select run_id, env, round, side, rtt_mean_us, rps, samples from {{ ref('stg_transport') }}
),

paired as (
    select
        f.run_id, f.env, f.round,
        f.rtt_mean_us / nullif(d.rtt_mean_us, 0) as rtt_ratio,
        f.rps / nullif(d.rps, 0) as rps_ratio,
        f.samples + d.samples as samples,
    from rounds as f
    join rounds as d
        on d.run_id = f.run_id and d.env = f.env and d.round = f.round and d.side = 'direct'
    where f.side = 'forwarded'
),

per_round as (
    select run_id, env, 'transport_rtt_mean_us' as figure, side as subject,
           round as window_idx, rtt_mean_us as value, samples
    from rounds
    union all
    select run_id, env, 'transport_rps', side, round, rps, null from rounds
    where rps is not null
    union all
    select run_id, env, 'transport_rtt_ratio', '', round, rtt_ratio, samples from paired
    union all
    select run_id, env, 'transport_rps_ratio', '', round, rps_ratio, null from paired
    where rps_ratio is not null
    union all
    select run_id, env, 'transport_rps_lost_share', '', round, 1 - rps_ratio, null from paired
    where rps_ratio is not null
),

measured as (
    /* The run: median of the rounds. */
    {{ with_run_median('per_round', 'window_idx') }}
)

{{ as_measures('measured', subject='subject', window_idx='window_idx') }}
