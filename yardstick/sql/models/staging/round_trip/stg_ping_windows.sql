/* PING probe windows: one row per run and window (batch only). */
with source as (
    select * from {{ source('lake', 'raw_ping_windows') }}
)

select
    run_id, env, window_idx, started_at, window_s, interval_ms, samples,
    rtt_min_us, rtt_max_us, rtt_mean_us, host_busy_share,
from source
