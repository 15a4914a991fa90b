/* Transport overhead: one server reached directly and through another path, interleaved in
   one run; ratios pair the two sides of the same round. */
create or replace view stg_transport as
select run_id, env, round, side, env_measured, transport, started_at, samples,
       rtt_mean_us, rtt_min_us, rps, error,
from raw_transport;

insert into figure_catalog values
    ('transport_rtt_mean_us', 'transport', 130, 'µs', 'absolute',
     'this network path, client host and load', 'lower',
     'mean PING round trip on each side (subject: direct or forwarded)'),
    ('transport_rps', 'transport', 131, 'req/s', 'absolute',
     'this machine and its load', 'higher',
     'single-client SET requests per second on each side'),
    ('transport_rtt_ratio', 'transport', 135, '×', 'ratio', null, 'lower',
     'PING round trip through this path ÷ direct, same server, same run'),
    ('transport_rps_ratio', 'transport', 136, '×', 'ratio', null, 'higher',
     'single-client SET rps through this path ÷ direct, same server, same run'),
    ('transport_rps_lost_share', 'transport', 137, 'share', 'ratio', null, 'lower',
     'share of direct single-client throughput lost to this path');

insert into measures by name
with sides as (
    select run_id, env, round, side, rtt_mean_us, rps, samples from stg_transport
    union all
    select run_id, env, null, side, avg(rtt_mean_us), avg(rps), sum(samples)
    from stg_transport
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
)

select run_id, env, 'transport_rtt_mean_us' as figure, side as subject, round as window_idx,
       rtt_mean_us as value, samples
from sides
union all
select run_id, env, 'transport_rps', side, round, rps, null from sides where rps is not null
union all
select run_id, env, 'transport_rtt_ratio', '', round, rtt_ratio, samples from paired
union all
select run_id, env, 'transport_rps_ratio', '', round, rps_ratio, null from paired
where rps_ratio is not null
union all
select run_id, env, 'transport_rps_lost_share', '', round, 1 - rps_ratio, null from paired
where rps_ratio is not null;
