/* The prober host's load sampled through each family: one row per run, family and sample
   (batch only). */
with source as (
    select * from {{ source('lake', 'raw_family_load') }}
)

select
    run_id, env, family, sample_idx, sampled_at, interval_s, busy_share, run_queue,
    own_running, load_1m,
    cores, on_server_host,
from source
