/* Server-side percentiles (Redis 7.0+): one row per run, snapshot, command and percentile
   (batch only). Cumulative since the server's stats began: they describe this run only as
   far as this run's calls dominate the count. */
with source as (
    select * from {{ source('lake', 'raw_latencystats') }}
)

select run_id, env, window_idx, taken_at, command, percentile, latency_us, from source
