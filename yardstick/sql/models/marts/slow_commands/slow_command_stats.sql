/* One row per run, environment and O(N) command: its repetitions' SLOWLOG durations, and the
   cost relative to a GET of the same run (both from the server's own clock). */
with reps as (
    select * from {{ ref('stg_slow_commands') }} where duration_us is not null
),

baseline as (
    select * from {{ ref('stg_slow_commands_baseline') }}
),

get_baseline as (
    /* Same server-side clock as the SLOWLOG: both read the execution time call() measures. */
    select
        a.run_id,
        a.env,
        (a.usec - b.usec) / nullif(a.calls - b.calls, 0) as get_usec_per_call,
        a.calls - b.calls as get_calls,
    from baseline as a
    join baseline as b
        on b.run_id = a.run_id and b.env = a.env and b.command = a.command
        and b.phase = 'before'
    where a.phase = 'after' and a.command = 'get'
),

per_command as (
    select
        s.run_id,
        s.env,
        s.command,
        any_value(s.args) as args,
        any_value(s.n_elements) as n_elements,
        any_value(s.returned) as returned,
        count(r.duration_us) as n,
        count(*) - count(r.duration_us) as unmatched,
        min(r.duration_us) as min_us,
        median(r.duration_us) as median_us,
        max(r.duration_us) as max_us,
        median(s.client_us) as median_client_us,
    from {{ ref('stg_slow_commands') }} as s
    left join reps as r
        on r.run_id = s.run_id and r.env = s.env and r.command = s.command
        and r.rep_idx = s.rep_idx
    group by s.run_id, s.env, s.command
)

select
    p.*,
    g.get_usec_per_call,
    g.get_calls,
    p.median_us / nullif(g.get_usec_per_call, 0) as over_get,
    p.max_us / nullif(p.min_us, 0) as max_over_min,
from per_command as p
left join get_baseline as g on g.run_id = p.run_id and g.env = p.env
