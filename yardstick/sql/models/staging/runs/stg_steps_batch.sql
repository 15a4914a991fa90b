/* The measurement steps of this update's batch: one row per environment, run and family.
   The mart steps keeps them across history. */
with source as (
    select * from {{ source('lake', 'raw_steps') }}
),

renamed as (
    select
        run_id,
        env,
        family,
        status,            /* ok | partial | failed | skipped | interrupted */
        reason,
        started_at,
        finished_at,
        duration_s,
        window_s,          /* seconds spent inside measurement windows */
        params,            /* the profile settings the family ran with (JSON) */
        params_digest,     /* their digest: a series holds only points with the same one */
    from source
)

select * from renamed
