/* PING round-trip histograms: one row per run, window and bucket (batch only). */
with source as (
    select * from {{ source('lake', 'raw_ping_histogram') }}
)

select run_id, env, window_idx, bucket, low_us, high_us, count, from source
