/* The measurement steps of this update's batch: one row per environment, run and family.
   The mart stg_steps keeps them across history. */
with source as (
    select * from {{ source('lake', 'raw_steps') }}
),

renamed as (
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
    from source
)

select * from renamed
