/* O(N) commands on fixture data (subject = the command): each repetition's duration is its
   own SLOWLOG entry; the cost relative to a GET of the same run and the max ÷ min dispersion
   are ratios that travel.
   SORT ... LIMIT 0 10 over LRANGE 0 -1 on the same list shows that LIMIT reduces M, not N. */
create or replace table slow_command_stats as
with reps as (
    select * from stg_slow_commands where duration_us is not null
),

get_baseline as (
    /* Same server-side clock as the SLOWLOG: both read the execution time call() measures. */
    select
        a.run_id,
        a.env,
        (a.usec - b.usec) / nullif(a.calls - b.calls, 0) as get_usec_per_call,
        a.calls - b.calls as get_calls,
    from stg_slow_commands_baseline as a
    join stg_slow_commands_baseline as b
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
    from stg_slow_commands as s
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
left join get_baseline as g on g.run_id = p.run_id and g.env = p.env;

insert into figure_catalog values
    ('slow_command_us', 'slow_commands', 220, 'µs', 'absolute',
     'CPU, Redis version, data size and load of this server', 'lower',
     'execution time of the command from its own SLOWLOG entry (median over repetitions)'),
    ('get_usec_per_call', 'slow_commands', 221, 'µs', 'absolute',
     'CPU, Redis version and load of this server', 'lower',
     'GET execution time in the same run (commandstats difference): the baseline'),
    ('slow_command_over_get', 'slow_commands', 222, '×', 'ratio', null, 'lower',
     'the command ÷ one GET, same run'),
    ('slow_command_max_over_min', 'slow_commands', 223, '×', 'ratio', null, 'lower',
     'dispersion over the repetitions: slowest ÷ fastest'),
    ('sort_limit_over_lrange_all', 'slow_commands', 224, '×', 'ratio', null, 'lower',
     'SORT ... ALPHA LIMIT 0 10 (returns 10) ÷ LRANGE 0 -1 (returns every element), '
     || 'same list');

insert into measures by name
with reps as (
    select s.*, g.get_usec_per_call,
    from stg_slow_commands as s
    join slow_command_stats as g
        on g.run_id = s.run_id and g.env = s.env and g.command = s.command
    where s.duration_us is not null
),

sort_vs_lrange as (
    select
        s.run_id,
        s.env,
        s.median_us / nullif(l.median_us, 0) as value,
        least(s.n, l.n) as n,
    from slow_command_stats as s
    join slow_command_stats as l
        on l.run_id = s.run_id and l.env = s.env and l.command = 'lrange_all'
    where s.command = 'sort_alpha_limit'
),

long as (
    /* Run level: the median over repetitions; each repetition is a window_idx row. */
    select run_id, env, 'slow_command_us' as figure, command as subject,
           null::int as window_idx, median_us::double as value, n as samples
    from slow_command_stats
    union all
    select run_id, env, 'slow_command_us', command, rep_idx, duration_us, 1 from reps
    union all
    select run_id, env, 'slow_command_over_get', command, null, over_get, n
    from slow_command_stats
    union all
    select run_id, env, 'slow_command_over_get', command, rep_idx,
           duration_us / nullif(get_usec_per_call, 0), 1
    from reps
    union all
    select run_id, env, 'slow_command_max_over_min', command, null, max_over_min, n
    from slow_command_stats
    where n >= 2
    union all
    select run_id, env, 'get_usec_per_call', '', null, any_value(get_usec_per_call),
           any_value(get_calls)
    from slow_command_stats
    group by run_id, env
    union all
    select run_id, env, 'sort_limit_over_lrange_all', '', null, value, n from sort_vs_lrange
)

select * from long;

create or replace view report_slow_commands as
select * from slow_command_stats
order by run_id, env, median_us desc;
