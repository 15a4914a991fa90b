/* The tool's own cost on the machine it ran on, across history: one row per run, measuring
   process, environment, phase and family. cpu_s is the tool's own CPU (the whole process over
   a run-wide phase, the family's own thread for a family), children_cpu_s the measurement
   tools it ran, so a trend of the tool's weight is `cpu_s` by phase. A run's warehouse and
   rendering phases happen after its other rows were loaded: they land later and arrive with
   a later update; keyed by the grain (delete+insert), a row loaded again replaces itself. */
{{ config(
    incremental_strategy='delete+insert',
    unique_key=['run_id', 'env', 'prober_hostname', 'prober_pid', 'phase', 'family', 'run_wide'],
) }}

with cost as (
    select * from {{ ref('stg_tool_cost') }}
),

shares as (
    select
        *,
        /* The share of the machine's cores the tool kept busy over the phase. */
        cpu_s / nullif(wall_s * cores, 0) as cpu_share_of_cores,
        /* The tool's share of all the machine's busy CPU over the phase (run-wide rows). */
        cpu_s / nullif(host_busy_cpu_s, 0) as cpu_share_of_host_busy,
    from cost
)

select * from shares
