/* memtier_benchmark: a mixed SET:GET workload; ops/s and latency per op type (absolute),
   the GET hit share (ratio). */
create or replace view stg_memtier as
select
    run_id, env, op_type, count, ops_sec, hits_sec, misses_sec,
    p50_ms * 1000 as p50_us,
    p99_ms * 1000 as p99_us,
    p999_ms * 1000 as p999_us,
    ratio, threads, clients_per_thread, data_size_bytes, started_at, elapsed_s,
    host_busy_share, tool_version,
from raw_memtier;

insert into figure_catalog values
    ('memtier_ops_sec', 'memtier', 120, 'ops/s', 'absolute',
     'this machine, with client and server sharing it, and its load', 'higher',
     'operations per second of the mixed memtier_benchmark workload, per op type'),
    ('memtier_p50_us', 'memtier', 121, 'µs', 'absolute',
     'this machine, with client and server sharing it, and its load', 'lower',
     'median latency per op type under the mixed workload'),
    ('memtier_p99_us', 'memtier', 122, 'µs', 'absolute',
     'this machine, with client and server sharing it, and its load', 'lower',
     '99th percentile latency per op type under the mixed workload'),
    ('memtier_p999_us', 'memtier', 123, 'µs', 'absolute',
     'this machine, with client and server sharing it, and its load', 'lower',
     '99.9th percentile latency per op type under the mixed workload'),
    ('memtier_get_hit_share', 'memtier', 124, 'share', 'ratio', null, null,
     'GETs that found their key ÷ all GETs (depends on the key range and SET:GET ratio)');

insert into measures by name
select run_id, env, 'memtier_ops_sec' as figure, op_type as subject, ops_sec as value,
       count::bigint as samples
from stg_memtier
union all
select run_id, env, 'memtier_p50_us', op_type, p50_us, count::bigint from stg_memtier
union all
select run_id, env, 'memtier_p99_us', op_type, p99_us, count::bigint from stg_memtier
union all
select run_id, env, 'memtier_p999_us', op_type, p999_us, count::bigint from stg_memtier
union all
select run_id, env, 'memtier_get_hit_share', '', hits_sec / nullif(hits_sec + misses_sec, 0),
       count::bigint
from stg_memtier
where op_type = 'gets';
