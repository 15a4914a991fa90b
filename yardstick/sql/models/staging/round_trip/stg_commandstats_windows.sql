/* INFO commandstats counters differenced per window: one row per run, window and command
   (batch only). Counters are never reset on the server; a restart shows as a negative delta. */
with snapshots as (
    select * from {{ ref('stg_commandstats') }}
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
from paired
