/* redis-benchmark cells: one row per run, cell and repetition (batch only), latencies in µs. */
with source as (
    select * from {{ source('lake', 'raw_benchmark') }}
),

renamed as (
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
    from source
)

select * from renamed
