/* One row per run, shape and repetition of the batch: what was loaded. */
select
    run_id,
    env,
    shape,
    repetition,
    type,                       /* string | hash | list */
    db,
    keys,
    elements_per_key,
    key_bytes,                  /* sum of key name lengths */
    value_bytes,                /* sum of values (and hash field names) */
    formula_overhead_bytes,     /* the 50 of keys x (key + value + 50) */
    load_s,
    started_at,
from {{ source('lake', 'raw_memory_loads') }}
