/* memtier_benchmark, one row per run, figure, op type and repetition (null: the run's median
   over repetitions, as for the throughput cells): ops/s and latency per op type (absolute),
   the GET hit share (ratio). Each repetition is a window, so figures get n, spread and the
   noisy mark; a run of one repetition has n = 1 and its noise is unknown. A repetition whose
   wall time stalled is left out (timed_repetitions; report_stalled_repetitions lists it): no
   figure counts it, so that every memtier figure's n stays the repetitions of its median. */
{{ config(materialized='ephemeral') }}

with timed as (
    /* The wall-time verdict on each repetition (the rule: timed_repetitions). */
    select * from ({{ in_batch(ref('timed_repetitions')) }}) as t
    where family = 'memtier'
),

memtier as (
    /* A stalled run's ops/s and latencies measured the stall, not the server. */
    select m.*
    from {{ ref('stg_memtier') }} as m
    anti join timed as s
        on s.run_id = m.run_id and s.env = m.env and s.repetition = m.repetition and s.stalled
),

per_rep as (
    select run_id, env, repetition, 'memtier_ops_sec' as figure, op_type as subject,
           ops_sec as value, count::bigint as samples
    from memtier
    union all
    select run_id, env, repetition, 'memtier_p50_us', op_type, p50_us, count::bigint
    from memtier
    union all
    select run_id, env, repetition, 'memtier_p99_us', op_type, p99_us, count::bigint
    from memtier
    union all
    select run_id, env, repetition, 'memtier_p999_us', op_type, p999_us, count::bigint
    from memtier
    union all
    select run_id, env, repetition, 'memtier_get_hit_share', '',
           hits_sec / nullif(hits_sec + misses_sec, 0), count::bigint
    from memtier
    where op_type = 'gets'
),

measured as (
    {{ with_run_median('per_rep', 'repetition') }}
)

{{ as_measures('measured', subject='subject', window_idx='repetition') }}
