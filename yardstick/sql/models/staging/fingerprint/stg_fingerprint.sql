/* The environment's facts as measured, long: one row per run, section and key (batch only). */
with source as (
    select * from {{ source('lake', 'raw_fingerprint') }}
)

select run_id, env, section, key, value from source
