/* One row per run and sampled key of the batch. */
select
    run_id,
    env,
    key,
    prefix,                     /* `user:*`, or `(no prefix)` */
    type,
    encoding,
    elements,                   /* items; bytes for strings (STRLEN) */
    memory_usage_bytes,
from {{ source('lake', 'raw_keyspace_keys') }}
