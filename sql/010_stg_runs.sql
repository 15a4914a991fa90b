/* Runs and their measurement steps, one row per environment per run (per family for steps). */
create or replace view stg_runs as
with source as (
    select * from raw_runs
),

renamed as (
    select
        run_id,
        env,
        date as run_date,
        profile,
        started_at,
        finished_at,
        duration_s,
        status,        /* ok | partial | failed */
        error,
        mode,          /* scratch | read-only */
        transport,
        url,           /* credentials already removed by the tool */
        host_group,
        nullif(same_server_as, '') as same_server_as,
        prober_on_host,
        tool_version,
        schema_version,
    from source
)

select * from renamed;

create or replace view stg_steps as
with source as (
    select * from raw_steps
)

select
    run_id,
    env,
    family,
    status,            /* ok | failed | skipped */
    reason,
    started_at,
    finished_at,
    duration_s,
    window_s,          /* seconds spent inside measurement windows */
from source;
