/* The slow_commands family's measures (subject = the command): the median over repetitions
   at run level, each repetition a window_idx row. SORT ... LIMIT 0 10 over LRANGE 0 -1 on the
   same list shows that LIMIT reduces M, not N. */
{{ config(materialized='ephemeral') }}

with stats as (
    {{ in_batch(ref('slow_command_stats')) }}
),

reps as (
    select s.*, g.get_usec_per_call,
    from {{ ref('stg_slow_commands') }} as s
    join stats as g
        on g.run_id = s.run_id and g.env = s.env and g.command = s.command
    where s.duration_us is not null
),

sort_vs_lrange as (
    select
        s.run_id,
        s.env,
        s.median_us / nullif(l.median_us, 0) as value,
        least(s.n, l.n) as n,
    from stats as s
    join stats as l
        on l.run_id = s.run_id and l.env = s.env and l.command = 'lrange_all'
    where s.command = 'sort_alpha_limit'
),

long as (
    /* Run level: the median over repetitions; each repetition is a window_idx row. */
    select run_id, env, 'slow_command_us' as figure, command as subject,
           null::int as window_idx, median_us::double as value, n as samples
    from stats
    union all
    select run_id, env, 'slow_command_us', command, rep_idx, duration_us, 1 from reps
    union all
    select run_id, env, 'slow_command_over_get', command, null, over_get, n
    from stats
    union all
    select run_id, env, 'slow_command_over_get', command, rep_idx,
           duration_us / nullif(get_usec_per_call, 0), 1
    from reps
    union all
    select run_id, env, 'slow_command_max_over_min', command, null, max_over_min, n
    from stats
    where n >= 2
    union all
    select run_id, env, 'get_usec_per_call', '', null, any_value(get_usec_per_call),
           any_value(get_calls)
    from stats
    group by run_id, env
    union all
    select run_id, env, 'sort_limit_over_lrange_all', '', null, value, n from sort_vs_lrange
)

{{ as_measures('long', subject='subject', window_idx='window_idx') }}
