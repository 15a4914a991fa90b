/* Transport rounds: one server reached directly and through another path, interleaved; one
   row per run, round and side (batch only). */
with source as (
    select * from {{ source('lake', 'raw_transport') }}
)

select
    run_id, env, round, side, env_measured, transport, started_at, samples,
    rtt_mean_us, rtt_min_us, rps, error,
from source
