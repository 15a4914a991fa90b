/* PING probe raw rows, and INFO commandstats counters differenced per window
   (counters are never reset on the server; a restart shows as a negative delta). */
create or replace view stg_ping_windows as
select run_id, env, window_idx, started_at, window_s, interval_ms, samples,
       rtt_min_us, rtt_max_us, rtt_mean_us, host_busy_share,
from raw_ping_windows;

create or replace view stg_ping_histogram as
select run_id, env, window_idx, bucket, low_us, high_us, count,
from raw_ping_histogram;

create or replace view stg_commandstats_windows as
with snapshots as (
    select * from raw_commandstats
),

paired as (
    select
        a.run_id,
        a.env,
        a.window_idx,
        a.command,
        b.taken_at as window_start,
        a.taken_at as window_end,
        a.calls - coalesce(b.calls, 0) as calls_delta,
        a.usec - coalesce(b.usec, 0) as usec_delta,
        a.failed_calls - coalesce(b.failed_calls, 0) as failed_calls_delta,
        a.rejected_calls - coalesce(b.rejected_calls, 0) as rejected_calls_delta,
    from snapshots as a
    left join snapshots as b
        on b.run_id = a.run_id and b.env = a.env and b.window_idx = a.window_idx
        and b.command = a.command and b.phase = 'before'
    where a.phase = 'after'
)

select
    *,
    calls_delta < 0 or usec_delta < 0 as counters_reset,  /* restart or CONFIG RESETSTAT */
from paired;

create or replace view stg_latencystats as
/* Server-side percentiles (Redis 7.0+), cumulative since the server's stats began:
   they describe this run only as far as this run's calls dominate the count. */
select run_id, env, window_idx, taken_at, command, percentile, latency_us,
from raw_latencystats;
