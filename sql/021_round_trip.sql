/* Round trip: client RTT percentiles from the pooled histograms, server time per PING from
   the commandstats difference, and their ratios - all within one run and one window. */
insert into figure_catalog values
    ('rtt_client_p50_us', 'round_trip', 10, 'µs', 'absolute',
     'network path, client host, scheduler and load of this run', 'lower',
     'median PING round trip seen by the client'),
    ('rtt_client_p90_us', 'round_trip', 11, 'µs', 'absolute',
     'network path, client host, scheduler and load of this run', 'lower',
     '90th percentile PING round trip seen by the client'),
    ('rtt_client_p99_us', 'round_trip', 12, 'µs', 'absolute',
     'network path, client host, scheduler and load of this run', 'lower',
     '99th percentile PING round trip seen by the client'),
    ('rtt_client_p999_us', 'round_trip', 13, 'µs', 'absolute',
     'network path, client host, scheduler and load of this run', 'lower',
     '99.9th percentile PING round trip seen by the client'),
    ('rtt_client_max_us', 'round_trip', 14, 'µs', 'absolute',
     'network path, client host, scheduler and load of this run', 'lower',
     'slowest PING round trip seen by the client'),
    ('rtt_client_mean_us', 'round_trip', 15, 'µs', 'absolute',
     'network path, client host, scheduler and load of this run', 'lower',
     'mean PING round trip seen by the client'),
    ('server_ping_usec_per_call', 'round_trip', 20, 'µs', 'absolute',
     'CPU, Redis version and load of this server', 'lower',
     'time Redis spent executing one PING (INFO commandstats difference)'),
    ('server_ping_p50_us', 'round_trip', 21, 'µs', 'absolute',
     'CPU, Redis version and load of this server; cumulative since its stats began', 'lower',
     'median PING execution time (INFO latencystats, Redis 7.0+)'),
    ('server_ping_p99_us', 'round_trip', 22, 'µs', 'absolute',
     'CPU, Redis version and load of this server; cumulative since its stats began', 'lower',
     '99th percentile PING execution time (INFO latencystats, Redis 7.0+)'),
    ('server_ping_p999_us', 'round_trip', 23, 'µs', 'absolute',
     'CPU, Redis version and load of this server; cumulative since its stats began', 'lower',
     '99.9th percentile PING execution time (INFO latencystats, Redis 7.0+)'),
    ('round_trip_host_busy_share', 'round_trip', 25, 'share', 'absolute',
     'everything else running on the prober''s machine', null,
     'CPU busy share of the prober''s machine during the PING windows'),
    ('client_over_server_ping', 'round_trip', 30, '×', 'ratio', null, 'lower',
     'mean client round trip ÷ server execution time of PING'),
    ('client_time_not_redis_share', 'round_trip', 31, 'share', 'ratio', null, 'lower',
     'share of the client round trip spent outside Redis (network, scheduler, client)'),
    ('probe_share_of_server_pings', 'round_trip', 32, 'share', 'ratio', null, null,
     'share of all PINGs the server has counted that this run''s probe sent: near 1, the '
     'cumulative server percentiles describe this run');

insert into measures by name
with hist as (
    /* Each window's histogram, plus the run's pooled histogram (window_idx null). */
    select run_id, env, window_idx, bucket, low_us, high_us, count
    from stg_ping_histogram
    union all
    select run_id, env, null, bucket, any_value(low_us), any_value(high_us), sum(count)
    from stg_ping_histogram
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
    ) as t(figure, q)
),

window_stats as (
    select run_id, env, window_idx, samples, rtt_min_us, rtt_max_us, rtt_mean_us,
           host_busy_share,
    from stg_ping_windows
    union all
    select
        run_id, env, null, sum(samples), min(rtt_min_us), max(rtt_max_us),
        sum(rtt_mean_us * samples) / sum(samples),
        sum(host_busy_share * window_s) / sum(window_s),
    from stg_ping_windows
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

ping_counters as (
    select run_id, env, window_idx, calls_delta, usec_delta
    from stg_commandstats_windows
    where command = 'ping' and not counters_reset and calls_delta > 0
    union all
    select run_id, env, null, sum(calls_delta), sum(usec_delta)
    from stg_commandstats_windows
    where command = 'ping' and not counters_reset and calls_delta > 0
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
    from stg_latencystats
    where command = 'ping'
    qualify window_idx = max(window_idx) over (partition by run_id, env)
),

probe_share as (
    select
        w.run_id, w.env,
        sum(w.calls_delta) / any_value(last.calls) as share,
    from stg_commandstats_windows as w
    join (
        select run_id, env, calls from raw_commandstats
        where command = 'ping' and phase = 'after'
        qualify window_idx = max(window_idx) over (partition by run_id, env)
    ) as last on last.run_id = w.run_id and last.env = w.env
    where w.command = 'ping' and not w.counters_reset
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
)

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
from ratios;
