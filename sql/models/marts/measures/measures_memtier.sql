/* memtier_benchmark, one row per run, figure and op type: ops/s and latency per op type
   (absolute), the GET hit share (ratio). */
{{ config(materialized='ephemeral') }}

with memtier as (
    select * from {{ ref('stg_memtier') }}
),

measured as (
    select run_id, env, 'memtier_ops_sec' as figure, op_type as subject, ops_sec as value,
           count::bigint as samples
    from memtier
    union all
    select run_id, env, 'memtier_p50_us', op_type, p50_us, count::bigint from memtier
    union all
    select run_id, env, 'memtier_p99_us', op_type, p99_us, count::bigint from memtier
    union all
    select run_id, env, 'memtier_p999_us', op_type, p999_us, count::bigint from memtier
    union all
    select run_id, env, 'memtier_get_hit_share', '',
           hits_sec / nullif(hits_sec + misses_sec, 0), count::bigint
    from memtier
    where op_type = 'gets'
)

{{ as_measures('measured', subject='subject') }}
