/* The counters family's measures: one row per batch run, environment, figure and subject (a
   command, or '' for the server), from the commandstats intervals that were not reset. */
{{ config(materialized='ephemeral') }}

with usable as (
    {{ in_batch(ref('counter_intervals'), alias='i') }}
    where not i.counters_reset and i.interval_s > 0
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

{{ as_measures('long', subject='subject') }}
