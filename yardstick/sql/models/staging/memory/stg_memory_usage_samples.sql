/* One row per run, shape, repetition and sampled key of the batch (MEMORY USAGE). */
select
    run_id,
    env,
    shape,
    repetition,
    key,
    encoding,
    elements,
    payload_bytes,
    memory_usage_bytes,         /* default samples (5 nested values) */
    memory_usage_all_bytes,     /* SAMPLES 0: every nested value */
from {{ source('lake', 'raw_memory_usage_samples') }}
