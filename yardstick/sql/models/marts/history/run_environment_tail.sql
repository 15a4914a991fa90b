/* State for run_environment: one row per environment, its last fingerprinted run with the
   facts compared against the next run and its segment. */
{{ config(incremental_strategy='delete+insert', unique_key='env') }}
-- depends_on: {{ ref('run_environment') }}

with batch_fingerprinted as (
    select e.run_id, e.env, e.started_at, e.server_product, e.server_version,
           e.redis_version, e.server_cores, e.server_cpu_model, e.transport,
           e.sentinel_master_address, e.segment,
    from {{ ref('run_environment') }} as e
    semi join {{ source('lake', 'batch_runs') }} as b on b.run_id = e.run_id and b.env = e.env
    where coalesce(e.server_version, e.redis_version) is not null
)

select * from batch_fingerprinted
qualify row_number() over (partition by env order by started_at desc, run_id desc) = 1
