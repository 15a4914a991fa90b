/* Intrinsic latency, one row per run and figure: what the OS steals from a tight loop on the
   server host, Redis excluded, and how it compares with the client's PING p99. */
{{ config(materialized='ephemeral') }}

with latest as (
    /* One intrinsic measurement per run; keep the last should a run hold two. */
    select * from {{ ref('stg_intrinsic') }}
    qualify row_number() over (partition by run_id, env order by started_at desc) = 1
),

client_p99 as (
    select run_id, env, value from {{ ref('measures_round_trip') }}
    where figure = 'rtt_client_p99_us' and window_idx is null
),

measured as (
    select run_id, env, 'intrinsic_max_us' as figure, max_us as value, total_runs as samples
    from latest
    union all
    select run_id, env, 'intrinsic_avg_ns_per_run', avg_ns_per_run, total_runs from latest
    union all
    select run_id, env, 'intrinsic_worst_over_avg', max_us * 1000 / nullif(avg_ns_per_run, 0),
           total_runs
    from latest
    union all
    select l.run_id, l.env, 'intrinsic_max_over_client_p99', l.max_us / nullif(c.value, 0), null
    from latest as l
    join client_p99 as c on c.run_id = l.run_id and c.env = l.env
)

{{ as_measures('measured') }}
