/* memtier_benchmark's mixed SET:GET workload: one row per run, repetition and op type (batch
   only), latencies in µs. A repetition is one memtier_benchmark invocation; its rows share
   their started_at, which numbers them from 0 (runs before repetitions existed: one, 0). */
with source as (
    select * from {{ source('lake', 'raw_memtier') }}
)

select
    run_id, env,
    (dense_rank() over (partition by run_id, env order by started_at) - 1)::int as repetition,
    op_type, count, ops_sec, hits_sec, misses_sec,
    p50_ms * 1000 as p50_us,
    p99_ms * 1000 as p99_us,
    p999_ms * 1000 as p999_us,
    ratio, threads, clients_per_thread, data_size_bytes, started_at, elapsed_s,
    host_busy_share, tool_version,
from source
