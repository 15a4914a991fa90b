/* The tool's CPU against the time it spent measuring, for an environment's report: one row
   per run and environment. The process that measured the environment (its runs row) is taken
   whole: its run-wide phases loaded so far (a run's warehouse and rendering arrive with a
   later update) over the measurement windows of every environment it measured in the run. */
with runs as (
    select run_id, env, prober_hostname, prober_pid from {{ ref('runs') }}
),

windows as (
    select r.run_id, r.prober_hostname, r.prober_pid, sum(s.window_s) as windows_s,
    from runs as r
    join {{ ref('steps') }} as s on s.run_id = r.run_id and s.env = r.env
    group by r.run_id, r.prober_hostname, r.prober_pid
),

phases as (
    select
        run_id,
        prober_hostname,
        prober_pid,
        /* The process's phases one after another (their sum is at most its total); a
           collection's family rows (run-wide, threads) are inside `measure`. */
        sum(cpu_s) filter (where cpu_scope = 'process' and phase <> 'total') as tool_cpu_s,
        sum(children_cpu_s) filter (where cpu_scope = 'process' and phase <> 'total')
            as children_cpu_s,
        sum(wall_s) filter (where cpu_scope = 'process' and phase <> 'total') as phases_wall_s,
        string_agg(phase, ', ' order by started_at)
            filter (where cpu_scope = 'process' and phase <> 'total') as phases,
        any_value(cpu_s) filter (where phase = 'total') as total_cpu_s,
        any_value(wall_s) filter (where phase = 'total') as total_wall_s,
        any_value(cores) as cores,
    from {{ ref('tool_cost') }}
    where run_wide
    group by run_id, prober_hostname, prober_pid
)

select
    r.run_id,
    r.env,
    r.prober_hostname,
    r.prober_pid,
    w.windows_s,
    p.tool_cpu_s,
    p.children_cpu_s,
    p.phases,
    p.phases_wall_s,
    p.total_cpu_s,
    p.total_wall_s,
    p.cores,
    /* CPU-seconds of the tool for each second spent inside a measurement window. */
    p.tool_cpu_s / nullif(w.windows_s, 0) as tool_cpu_per_window_s,
    /* Measurement windows over the process's wall (P2 in docs/reports.md). */
    w.windows_s / nullif(coalesce(p.total_wall_s, p.phases_wall_s), 0) as windows_per_wall,
from runs as r
join phases as p
    on p.run_id = r.run_id
    and p.prober_hostname = r.prober_hostname
    and p.prober_pid = r.prober_pid
left join windows as w
    on w.run_id = r.run_id
    and w.prober_hostname = r.prober_hostname
    and w.prober_pid = r.prober_pid
