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
    /* Each snapshot's previous one of the same server run (one row per snapshot). */
    select
        *,
        lag(run_id) over w as prev_run_id,
        lag(taken_at) over w as prev_taken_at,
    from snapshots
    window w as (partition by env, server_run_id order by taken_at, run_id)
),

with_previous as (
    /* Each command's row with the same command's row before it in this server run: it is
       the previous snapshot's when that snapshot listed the command. A window, not a join
       of the counters with themselves: it sorts within bounded memory (spilling), where
       the self-join of a month of collections did not. */
    select
        c.*,
        p.prev_run_id,
        p.prev_taken_at,
        lag(c.run_id) over w as before_run_id,
        lag(c.calls) over w as before_calls,
        lag(c.usec) over w as before_usec,
        lag(c.failed_calls) over w as before_failed_calls,
        lag(c.rejected_calls) over w as before_rejected_calls,
    from counters as c
    join paired as p on p.run_id = c.run_id and p.env = c.env
    window w as (partition by c.env, c.server_run_id, c.command order by c.taken_at, c.run_id)
),

deltas as (
    select
        env,
        server_run_id,
        run_id,
        taken_at,
        prev_run_id,
        epoch(taken_at) - epoch(prev_taken_at) as interval_s,
        command,
        /* The row before is the previous snapshot's, or the command was not in it: then it
           had not been called yet (0). */
        calls - coalesce(if(before_run_id = prev_run_id, before_calls, null), 0)
            as calls_delta,
        usec - coalesce(if(before_run_id = prev_run_id, before_usec, null), 0) as usec_delta,
        failed_calls - coalesce(if(before_run_id = prev_run_id, before_failed_calls, null), 0)
            as failed_calls_delta,
        rejected_calls
            - coalesce(if(before_run_id = prev_run_id, before_rejected_calls, null), 0)
            as rejected_calls_delta,
    from with_previous
    where prev_run_id is not null and not is_prior
),

flagged as (
    select
        *,
        bool_or(calls_delta < 0 or usec_delta < 0) over (partition by env, run_id)
            as counters_reset,
    from deltas
)

select * from flagged
