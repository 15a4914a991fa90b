/* Round trip, one row per run, figure and window (null: the run): client RTT percentiles from
   the pooled histograms, server time per PING from the commandstats difference, and their
   ratios - all within one run and one window. */
{{ config(materialized='ephemeral') }}

with hist as (
    /* Each window's histogram, plus the run's pooled histogram (window_idx null). */
    select run_id, env, window_idx, bucket, low_us, high_us, count
    from {{ ref('stg_ping_histogram') }}
    union all
    select run_id, env, null, bucket, any_value(low_us), any_value(high_us), sum(count)
    from {{ ref('stg_ping_histogram') }}
    group by run_id, env, bucket
),

cumulative as (
    select
        *,
        sum(count) over (partition by run_id, env, window_idx order by bucket) as cum_count,
        sum(count) over (partition by run_id, env, window_idx) as total,
    from hist
),

wanted as (
    select * from (values
        ('rtt_client_p50_us', 0.50),
        ('rtt_client_p90_us', 0.90),
        ('rtt_client_p99_us', 0.99),
        ('rtt_client_p999_us', 0.999)
    -- t(...) names the VALUES columns (the linter reads it as an unused alias).
    ) as t(figure, q)  -- noqa: AL05, LT01
),

window_stats as (
    select run_id, env, window_idx, samples, rtt_min_us, rtt_max_us, rtt_mean_us,
           host_busy_share,
    from {{ ref('stg_ping_windows') }}
    union all
    select
        run_id, env, null, sum(samples), min(rtt_min_us), max(rtt_max_us),
        /* Ordered float sums: the same bits on every build. */
        sum(rtt_mean_us * samples order by window_idx) / sum(samples),
        sum(host_busy_share * window_s order by window_idx)
            / sum(window_s order by window_idx),
    from {{ ref('stg_ping_windows') }}
    group by run_id, env
),

percentiles as (
    /* First bucket whose cumulative count reaches q; its geometric middle, kept inside
       the exact min and max of the samples. */
    select
        c.run_id, c.env, c.window_idx, w.figure,
        min_by(sqrt(c.low_us * c.high_us), c.bucket) as mid_us,
    from cumulative as c
    join wanted as w on c.cum_count >= w.q * c.total
    group by all
),

client as (
    select p.run_id, p.env, p.figure, p.window_idx,
           greatest(least(p.mid_us, s.rtt_max_us), s.rtt_min_us) as value, s.samples,
    from percentiles as p
    join window_stats as s
        on s.run_id = p.run_id and s.env = p.env
        and s.window_idx is not distinct from p.window_idx
    union all
    select run_id, env, 'rtt_client_max_us', window_idx, rtt_max_us, samples from window_stats
    union all
    select run_id, env, 'rtt_client_mean_us', window_idx, rtt_mean_us, samples from window_stats
),

ping_windows as (
    select * from {{ ref('stg_commandstats_windows') }}
    where command = 'ping'
),

ping_counters as (
    select run_id, env, window_idx, calls_delta, usec_delta
    from ping_windows
    where not counters_reset and calls_delta > 0
    union all
    select run_id, env, null, sum(calls_delta), sum(usec_delta)
    from ping_windows
    where not counters_reset and calls_delta > 0
    group by run_id, env
),

server as (
    select run_id, env, 'server_ping_usec_per_call' as figure, window_idx,
           usec_delta / calls_delta as value, calls_delta as samples,
    from ping_counters
),

server_percentiles as (
    /* The last snapshot of the run: cumulative, so the latest is the most complete. */
    select run_id, env, percentile, latency_us,
    from {{ ref('stg_latencystats') }}
    where command = 'ping'
    qualify window_idx = max(window_idx) over (partition by run_id, env)
),

last_ping_calls as (
    /* Every PING the server has counted, at the run's last snapshot. */
    select run_id, env, calls
    from {{ ref('stg_commandstats') }}
    where command = 'ping' and phase = 'after'
    qualify window_idx = max(window_idx) over (partition by run_id, env)
),

probe_share as (
    select
        w.run_id, w.env,
        sum(w.calls_delta) / any_value(last.calls) as share,
    from ping_windows as w
    join last_ping_calls as last on last.run_id = w.run_id and last.env = w.env
    where not w.counters_reset
    group by w.run_id, w.env
),

ratios as (
    select
        s.run_id, s.env, s.window_idx,
        c.value / nullif(s.value, 0) as client_over_server,
        1 - s.value / nullif(c.value, 0) as not_redis_share,
        c.samples,
    from server as s
    join client as c
        on c.run_id = s.run_id and c.env = s.env
        and c.window_idx is not distinct from s.window_idx
        and c.figure = 'rtt_client_mean_us'
),

measured as (
    select run_id, env, figure, window_idx, value, samples from client
    union all
    select run_id, env, figure, window_idx, value, samples from server
    union all
    select run_id, env,
           case percentile when 50 then 'server_ping_p50_us' when 99 then 'server_ping_p99_us'
                           when 99.9 then 'server_ping_p999_us' end as figure,
           null as window_idx, latency_us as value, null as samples
    from server_percentiles
    where percentile in (50, 99, 99.9)
    union all
    select run_id, env, 'round_trip_host_busy_share' as figure, window_idx,
           host_busy_share as value, samples
    from window_stats
    union all
    select run_id, env, 'probe_share_of_server_pings' as figure, null as window_idx,
           share as value, null as samples
    from probe_share
    union all
    select run_id, env, 'client_over_server_ping' as figure, window_idx,
           client_over_server as value, samples
    from ratios
    union all
    select run_id, env, 'client_time_not_redis_share' as figure, window_idx,
           not_redis_share as value, samples
    from ratios
)

{{ as_measures('measured', window_idx='window_idx') }}
