/* One row per run, environment, shape and clean repetition with a positive difference: every
   memory figure of that repetition. A ratio below 1 is an estimate that promises you will fit
   when you will not: the dangerous direction. */
with repetitions as (
    {{ in_batch(ref('memory_repetitions')) }}
)

select
    run_id,
    env,
    shape,
    repetition,
    type,
    keys,
    usage_keys,
    first_taken_at,
    bytes_per_key as mem_bytes_per_key,
    usage_mean_bytes as mem_usage_bytes_per_key,
    bytes_per_key / nullif(payload_per_key, 0) as mem_bytes_per_payload_byte,
    usage_mean_bytes / nullif(bytes_per_key, 0) as mem_usage_over_actual,
    usage_all_mean_bytes / nullif(bytes_per_key, 0) as mem_usage_all_over_actual,
    formula_per_key / nullif(bytes_per_key, 0) as mem_formula_over_actual,
    /* A string has nothing nested to sample. */
    case when type <> 'string' then samples_default_over_all end
        as mem_samples_default_over_all,
    removal_recovered_share as mem_removal_recovered_share,
from repetitions
where clean and bytes_per_key > 0
