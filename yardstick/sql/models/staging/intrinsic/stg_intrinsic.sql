/* Intrinsic latency (redis-cli --intrinsic-latency on the server host): one row per run and
   measurement (batch only). */
with source as (
    select * from {{ source('lake', 'raw_intrinsic') }}
)

select
    run_id, env, started_at, duration_s, max_us, total_runs, avg_us_per_run,
    avg_ns_per_run, worst_over_avg_printed, host_busy_share, load_1m_before,
    tool_path, tool_version,
from source
