/* The runs of this update's batch: one row per environment per run. The mart runs keeps
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
        status,
        /* ok | partial | failed | interrupted | missing (its site's run never ran) */
        error,
        mode,          /* scratch | read-only */
        transport,
        url,           /* credentials already removed by the tool */
        host_group,
        nullif(same_server_as, '') as same_server_as,
        prober_on_host,
        tool_version,
        schema_version,
        coalesce(site, 'local') as site,  /* where the prober sits (README: Many sites) */
        prober_hostname,   /* the machine and process that measured */
        prober_pid,
        worker_pid,        /* the Prefect worker that started it (a site's worker) */
        flow_run_id,       /* the Prefect flow run that measured (a site's own run) */
    from source
)

select * from renamed
