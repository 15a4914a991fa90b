/* What the tool cost while it measured one environment, for its report: one row per run,
   environment and phase shown. The run-wide phases (start, measuring, landing, warehouse,
   rendering, total) of the process that measured the environment (its runs row names it),
   then the environment's own families and landing, each in its own thread. */
with runs as (
    select run_id, env, prober_hostname, prober_pid from {{ ref('runs') }}
),

cost as (
    select * from {{ ref('tool_cost') }}
),

run_wide as (
    select r.env as report_env, c.*
    from runs as r
    join cost as c
        on c.run_id = r.run_id
        and c.run_wide
        and c.prober_hostname = r.prober_hostname
        and c.prober_pid = r.prober_pid
),

own as (
    select env as report_env, * from cost where not run_wide
),

shown as (
    select * from run_wide
    union all by name
    select * from own
)

select
    run_id,
    report_env as env,
    env as landed_under,
    run_wide,
    phase,
    family,
    /* Rows in the order a run goes through them; an environment's inside `measure`. */
    case phase
        when 'start' then 0 when 'measure' then 1 when 'family' then 2 when 'landing' then
            case when run_wide then 4 else 3 end
        when 'warehouse' then 5 when 'rendering' then 6 when 'total' then 7 else 8
    end as phase_order,
    cpu_scope,
    cpu_s,
    children_cpu_s,
    server_cpu_s,
    peak_rss_bytes,
    rss_source,
    wall_s,
    started_at,
    finished_at,
    overlapped,
    host_busy_cpu_s,
    cores,
    cpu_share_of_cores,
    cpu_share_of_host_busy,
    prober_hostname,
    prober_pid,
from shown
