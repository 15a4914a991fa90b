/* Commandstats over time: differences between consecutive snapshots of the same server run
   (counters are never reset by the tool). An interval in which any counter went down was
   reset by someone (CONFIG RESETSTAT) and is left out; a restart starts a new series. */
create or replace table counter_intervals as
with snapshots as (
    select distinct env, server_run_id, run_id, taken_at
    from stg_commandstats_snapshots
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
    join stg_commandstats_snapshots as c on c.run_id = p.run_id and c.env = p.env
    left join stg_commandstats_snapshots as b
        on b.run_id = p.prev_run_id and b.env = p.env and b.command = c.command
    where p.prev_run_id is not null
),

flagged as (
    select
        *,
        bool_or(calls_delta < 0 or usec_delta < 0) over (partition by env, run_id)
            as counters_reset,
    from deltas
)

select * from flagged;

insert into figure_catalog values
    ('server_busy_share', 'counters', 290, 'share', 'ratio', null, 'lower',
     'share of the interval since the previous snapshot that Redis spent executing commands'),
    ('server_calls_per_s', 'counters', 291, 'calls/s', 'absolute',
     'the workload of this server in this interval', null,
     'commands executed per second since the previous snapshot'),
    ('counters_interval_min', 'counters', 292, 'min', 'absolute',
     'the collection schedule of this environment', null,
     'minutes between this snapshot and the previous one of the same server run'),
    ('command_server_time_share', 'counters', 293, 'share', 'ratio', null, null,
     'share of the server''s execution time in the interval spent on this command'),
    ('command_usec_per_call', 'counters', 294, 'µs', 'absolute',
     'CPU, Redis version, data and load of this server', 'lower',
     'mean execution time of this command over the interval (commandstats difference)'),
    ('command_calls_per_s', 'counters', 295, 'calls/s', 'absolute',
     'the workload of this server in this interval', null,
     'calls of this command per second over the interval');

insert into measures by name
with usable as (
    select * from counter_intervals
    where not counters_reset and interval_s > 0
),

totals as (
    select
        run_id,
        env,
        any_value(interval_s) as interval_s,
        sum(calls_delta) as calls,
        sum(usec_delta) as usec,
    from usable
    group by run_id, env
),

per_command as (
    select u.*, t.usec as total_usec,
    from usable as u
    join totals as t on t.run_id = u.run_id and t.env = u.env
    where u.calls_delta > 0
),

long as (
    select run_id, env, '' as subject, 'server_busy_share' as figure,
           usec / (interval_s * 1e6) as value, calls as samples
    from totals
    union all
    select run_id, env, '', 'server_calls_per_s', calls / interval_s, calls from totals
    union all
    select run_id, env, '', 'counters_interval_min', interval_s / 60, null from totals
    union all
    select run_id, env, command, 'command_server_time_share',
           usec_delta / nullif(total_usec, 0), calls_delta
    from per_command
    union all
    select run_id, env, command, 'command_usec_per_call', usec_delta / calls_delta, calls_delta
    from per_command
    union all
    select run_id, env, command, 'command_calls_per_s', calls_delta / interval_s, calls_delta
    from per_command
)

select run_id, env, figure, subject, null::int as window_idx, value, samples from long;

create or replace view report_command_costs as
/* Which commands cost the server most since the previous snapshot. */
select
    run_id,
    env,
    command,
    interval_s,
    calls_delta as calls,
    calls_delta / interval_s as calls_per_s,
    usec_delta,
    usec_delta / nullif(calls_delta, 0) as usec_per_call,
    usec_delta / nullif(sum(usec_delta) over (partition by run_id, env), 0)
        as share_of_server_time,
    failed_calls_delta as failed_calls,
    rejected_calls_delta as rejected_calls,
    row_number() over (partition by run_id, env order by usec_delta desc, command) as cost_rank,
from counter_intervals
where not counters_reset and interval_s > 0 and calls_delta > 0
order by run_id, env, cost_rank;
