/* The memory family's measures (subject = the shape): bytes per key by difference and how far
   MEMORY USAGE, SAMPLES 0 and the classic formula land from it, per repetition and as the
   median over repetitions; fragmentation and used_memory of the run ('' subject). */
{{ config(materialized='ephemeral') }}

with rep_figures as (
    {{ in_batch(ref('memory_rep_figures')) }}
),

shapes as (
    {{ in_batch(ref('memory_shapes')) }}
),

repetitions as (
    {{ in_batch(ref('memory_repetitions')) }}
),

per_rep as (
    unpivot rep_figures
    on mem_bytes_per_key, mem_usage_bytes_per_key, mem_bytes_per_payload_byte,
       mem_usage_over_actual, mem_usage_all_over_actual, mem_formula_over_actual,
       mem_samples_default_over_all, mem_removal_recovered_share
    into name figure value value
),

run_level as (
    unpivot shapes
    on mem_bytes_per_key, mem_usage_bytes_per_key, mem_bytes_per_payload_byte,
       mem_usage_over_actual, mem_usage_all_over_actual, mem_formula_over_actual,
       mem_samples_default_over_all, mem_removal_recovered_share
    into name figure value value
),

loaded as (
    /* The reading with the most memory in use, and the first one taken. */
    select
        run_id,
        env,
        arg_max(fragmentation_after, after_bytes) as fragmentation_loaded,
        max(after_bytes) as used_memory_loaded_bytes,
        arg_min(fragmentation_before, first_taken_at) as fragmentation_empty,
    from repetitions
    group by run_id, env
),

long as (
    select
        run_id, env, figure, shape as subject, repetition as window_idx, value,
        case when figure like 'mem_usage%' or figure = 'mem_samples_default_over_all'
             then usage_keys else keys end as samples,
    from per_rep
    union all by name
    select
        run_id, env, figure, shape as subject, null::int as window_idx, value,
        case when figure like 'mem_usage%' or figure = 'mem_samples_default_over_all'
             then usage_keys else keys_loaded end as samples,
    from run_level
    union all by name
    select run_id, env, 'mem_fragmentation_ratio_empty' as figure, '' as subject,
           fragmentation_empty as value,
    from loaded
    union all by name
    select run_id, env, 'mem_fragmentation_ratio_loaded' as figure, '' as subject,
           fragmentation_loaded as value,
    from loaded
    union all by name
    select run_id, env, 'mem_used_memory_loaded_bytes' as figure, '' as subject,
           used_memory_loaded_bytes::double as value,
    from loaded
)

{{ as_measures('long', subject='subject', window_idx='window_idx') }}
