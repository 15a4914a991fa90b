/* The tool's own cost per phase of a run (yardstick/host/selfcost.py): one row per run,
   measuring process, phase and family (batch only; a run's warehouse and rendering phases
   come in a later batch than its other rows, see docs/reports.md). */
with source as (
    select * from {{ source('lake', 'raw_tool_cost') }}
),

renamed as (
    select
        run_id,
        env,              /* run-wide rows: the run's first environment, which carries them */
        run_wide,         /* a phase of the whole process, not of one environment */
        phase,            /* start | measure | family | landing | warehouse | rendering | total */
        coalesce(family, '') as family,
        cpu_scope,        /* process | thread (a family's own thread) */
        cpu_s,
        children_cpu_s,   /* processes it started and reaped: redis-benchmark, redis-cli, … */
        server_cpu_s,     /* a Prefect server it started; null: none */
        peak_rss_bytes,
        rss_source,
        /* VmHWM (reset at the phase start) | ru_maxrss (since the process start) */
        wall_s,
        started_at,
        finished_at,
        overlapped,
        host_busy_cpu_s,  /* every process of the machine, /proc/stat */
        cores,
        prober_hostname,
        prober_pid,
    from source
)

select * from renamed
