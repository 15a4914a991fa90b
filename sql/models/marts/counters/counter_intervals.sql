/* One row per commandstats snapshot (run, environment) and command: the difference from the
   previous snapshot of the same server run (counters are never reset by the tool). An
   interval in which any counter went down was reset by someone (CONFIG RESETSTAT) and is
   flagged; a restart starts a new series. The batch's first snapshot of a server run is
   differenced against the state commandstats_last_snapshot. */
{% set prior = prior_relation('commandstats_last_snapshot') %}

with fresh as (
    select *, false as is_prior, from {{ ref('stg_commandstats_snapshots') }}
),

prior as (
    {% if is_incremental() and prior %}
    select p.*, true as is_prior,
    from {{ prior }} as p
    semi join fresh as f on f.env = p.env and f.server_run_id = p.server_run_id
    {% else %}
    select * from fresh where false
    {% endif %}
),

counters as (
    select * from prior
    union all by name
    select * from fresh
),

snapshots as (
    select distinct env, server_run_id, run_id, taken_at, is_prior,
    from counters
),

paired as (
    select
        *,
        lag(run_id) over w as prev_run_id,
        lag(taken_at) over w as prev_taken_at,
    from snapshots
    window w as (partition by env, server_run_id order by taken_at, run_id)
),

deltas as (
    select
        p.env,
        p.server_run_id,
        p.run_id,
        p.taken_at,
        p.prev_run_id,
        epoch(p.taken_at) - epoch(p.prev_taken_at) as interval_s,
        c.command,
        /* A command absent from the earlier snapshot had not been called yet. */
        c.calls - coalesce(b.calls, 0) as calls_delta,
        c.usec - coalesce(b.usec, 0) as usec_delta,
        c.failed_calls - coalesce(b.failed_calls, 0) as failed_calls_delta,
        c.rejected_calls - coalesce(b.rejected_calls, 0) as rejected_calls_delta,
    from paired as p
    join counters as c on c.run_id = p.run_id and c.env = p.env
    left join counters as b
        on b.run_id = p.prev_run_id and b.env = p.env and b.command = c.command
    where p.prev_run_id is not null and not p.is_prior
),

flagged as (
    select
        *,
        bool_or(calls_delta < 0 or usec_delta < 0) over (partition by env, run_id)
            as counters_reset,
    from deltas
)

select * from flagged
