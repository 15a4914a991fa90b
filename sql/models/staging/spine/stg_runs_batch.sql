/* The runs of this update's batch: one row per environment per run. The mart stg_runs keeps
   them across history. */
with source as (
    select * from {{ source('lake', 'raw_runs') }}
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
        status,        /* ok | partial | failed | interrupted */
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

select * from renamed
