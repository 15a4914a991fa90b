/* Throughput, one row per run, figure, subject (a benchmark cell or a pair of them) and
   repetition (null: the run's median): redis-benchmark cells (absolute) and the ratios between
   cells of one run - pipeline speed-up, concurrency speed-up, p50 inflation with clients -
   and how many repetitions of each cell stalled (left out of all the others). */
{{ config(materialized='ephemeral') }}

with timed as (
    /* The wall-time verdict on each repetition (the rule: timed_repetitions). */
    select * from ({{ in_batch(ref('timed_repetitions')) }}) as t
    where family = 'throughput'
),

ok as (
    /* A stalled repetition's rps measured the stall, not the server: left out of every
       figure below, so a cell's median and its n are those of the other repetitions. */
    select b.*
    from {{ ref('stg_benchmark') }} as b
    anti join timed as s
        on s.run_id = b.run_id and s.env = b.env and s.subject = b.cell
        and s.repetition = b.repetition and s.stalled
    where b.status = 'ok'
),

stalls as (
    /* Judged cells only (3 timed repetitions or more): a cell that could not be judged has
       no count, rather than a 0 that would claim it had none. */
    select run_id, env, subject as cell, count(*) filter (where stalled) as stalled_repetitions,
    from timed
    where judged
    group by run_id, env, subject
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
    /* Ordered float means: the same bits on every build. */
    select run_id, env, repetition, avg(host_busy_share order by cell) as share
    from ok
    group by all
    union all
    select run_id, env, null, avg(host_busy_share order by repetition, cell) from ok group by all
),

measured as (
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
    select run_id, env, 'pipeline_speedup', subject, repetition, speedup, null
    from pipeline_pairs
    union all
    select run_id, env, 'concurrency_speedup', subject, repetition, speedup, null
    from client_pairs
    union all
    select run_id, env, 'p50_inflation_clients', subject, repetition, p50_inflation, null
    from client_pairs
    union all
    select run_id, env, 'bench_stalled_repetitions', cell, null, stalled_repetitions, null
    from stalls
)

{{ as_measures('measured', subject='subject', window_idx='window_idx') }}
