/* Each environment's latest full run (collections excluded): one row per environment, replaced
   when a batch brings a later one. Reports, changes and the comparison read it. */
{{ config(incremental_strategy='delete+insert', unique_key='env') }}

with full_runs as (
    select * from {{ ref('stg_runs_batch') }}
    where {{ is_full_run('profile') }}
)

select
    run_id, env, started_at, profile, status, mode, transport, same_server_as,
    error,  /* why not everything was measured (a missing site's reason) */
from full_runs
qualify row_number() over (partition by env order by started_at desc, run_id desc) = 1
