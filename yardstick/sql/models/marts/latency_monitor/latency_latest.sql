/* One row per collection (run, environment) and latency event: LATENCY LATEST's latest spike
   and all-time worst, kept across history. */
select * from {{ ref('stg_latency_latest') }}
