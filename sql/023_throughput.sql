/* Throughput: redis-benchmark cells (absolute) and the ratios between cells of one run:
   pipeline speed-up, concurrency speed-up, p50 inflation with clients. */
create or replace view stg_benchmark as
select
    run_id, env, repetition, clients, pipeline, payload_bytes, requests,
    upper(test) as test,
    status, error, rps,
    p50_ms * 1000 as p50_us,   /* redis-benchmark prints ms with 3 decimals: 1 µs steps */
    p99_ms * 1000 as p99_us,
    avg_ms * 1000 as avg_us,
    max_ms * 1000 as max_us,
    started_at, elapsed_s, host_busy_share, tool_version,
    /* The cell's name, as reports and trend queries show it. */
    lower(test) || ' c' || clients || ' P' || pipeline || ' ' || payload_bytes || 'B' as cell,
from raw_benchmark;

insert into figure_catalog values
    ('bench_rps', 'throughput', 100, 'req/s', 'absolute',
     'this machine, with client and server sharing it, and its load', 'higher',
     'requests per second of one redis-benchmark cell'),
    ('bench_p50_us', 'throughput', 101, 'µs', 'absolute',
     'this machine, with client and server sharing it, and its load', 'lower',
     'median latency of one redis-benchmark cell'),
    ('bench_p99_us', 'throughput', 102, 'µs', 'absolute',
     'this machine, with client and server sharing it, and its load', 'lower',
     '99th percentile latency of one redis-benchmark cell'),
    ('bench_host_busy_share', 'throughput', 103, 'share', 'absolute',
     'everything else running on the prober''s machine', null,
     'CPU busy share of the prober''s machine during the benchmark cells'),
    ('pipeline_speedup', 'throughput', 110, '×', 'ratio', null, 'higher',
     'rps with the deepest pipeline ÷ rps without pipelining, same test, clients, payload'),
    ('concurrency_speedup', 'throughput', 111, '×', 'ratio', null, 'higher',
     'rps with the most clients ÷ rps with the fewest, same test, pipeline, payload'),
    ('p50_inflation_clients', 'throughput', 112, '×', 'ratio', null, 'lower',
     'p50 with the most clients ÷ p50 with the fewest: the queue, not the server');

insert into measures by name
with ok as (
    select * from stg_benchmark where status = 'ok'
),

cells as (
    /* Each repetition, and the run-level median of the repetitions (window_idx null). */
    select run_id, env, cell, test, clients, pipeline, payload_bytes, repetition,
           rps, p50_us, p99_us,
    from ok
    union all
    select run_id, env, cell, test, clients, pipeline, payload_bytes, null,
           median(rps), median(p50_us), median(p99_us),
    from ok
    group by all
),

bounds as (
    select run_id, env,
           min(clients) as c_lo, max(clients) as c_hi,
           min(pipeline) as p_lo, max(pipeline) as p_hi,
    from ok
    group by all
),

pipeline_pairs as (
    select
        lo.run_id, lo.env, lo.repetition,
        lower(lo.test) || ' c' || lo.clients || ' ' || lo.payload_bytes || 'B' as subject,
        hi.rps / nullif(lo.rps, 0) as speedup,
    from cells as lo
    join bounds as b on b.run_id = lo.run_id and b.env = lo.env and b.p_hi > b.p_lo
    join cells as hi
        on hi.run_id = lo.run_id and hi.env = lo.env and hi.test = lo.test
        and hi.clients = lo.clients and hi.payload_bytes = lo.payload_bytes
        and hi.repetition is not distinct from lo.repetition
        and hi.pipeline = b.p_hi
    where lo.pipeline = b.p_lo
),

client_pairs as (
    select
        lo.run_id, lo.env, lo.repetition,
        lower(lo.test) || ' P' || lo.pipeline || ' ' || lo.payload_bytes || 'B' as subject,
        hi.rps / nullif(lo.rps, 0) as speedup,
        hi.p50_us / nullif(lo.p50_us, 0) as p50_inflation,
    from cells as lo
    join bounds as b on b.run_id = lo.run_id and b.env = lo.env and b.c_hi > b.c_lo
    join cells as hi
        on hi.run_id = lo.run_id and hi.env = lo.env and hi.test = lo.test
        and hi.pipeline = lo.pipeline and hi.payload_bytes = lo.payload_bytes
        and hi.repetition is not distinct from lo.repetition
        and hi.clients = b.c_hi
    where lo.clients = b.c_lo
),

busy as (
    select run_id, env, repetition, avg(host_busy_share) as share from ok group by all
    union all
    select run_id, env, null, avg(host_busy_share) from ok group by all
)

select run_id, env, 'bench_rps' as figure, cell as subject, repetition as window_idx,
       rps as value, null as samples
from cells
union all
select run_id, env, 'bench_p50_us', cell, repetition, p50_us, null from cells
union all
select run_id, env, 'bench_p99_us', cell, repetition, p99_us, null from cells
union all
select run_id, env, 'bench_host_busy_share', '', repetition, share, null from busy
union all
select run_id, env, 'pipeline_speedup', subject, repetition, speedup, null from pipeline_pairs
union all
select run_id, env, 'concurrency_speedup', subject, repetition, speedup, null from client_pairs
union all
select run_id, env, 'p50_inflation_clients', subject, repetition, p50_inflation, null
from client_pairs;

create or replace view report_benchmark_failures as
/* Cells that failed or timed out, shown in the report instead of silently missing. */
select run_id, env, cell, repetition, test, error
from stg_benchmark
where status <> 'ok'
order by cell, repetition;
