/* One row per run, environment and memory shape: the median over repetitions of every figure,
   and what went in (key name length, value bytes per element), and the longest wait for
   used_memory to settle before a repetition. */
with rep_figures as (
    {{ in_batch(ref('memory_rep_figures')) }}
),

repetitions as (
    {{ in_batch(ref('memory_repetitions')) }}
),

medians as (
    select
        run_id,
        env,
        shape,
        any_value(type) as type,
        any_value(keys) as keys,
        count(*) as n,
        sum(keys) as keys_loaded,
        sum(usage_keys) as usage_keys,
        min(first_taken_at) as first_taken_at,
        median(mem_bytes_per_key) as mem_bytes_per_key,
        min(mem_bytes_per_key) as mem_bytes_per_key_min,
        max(mem_bytes_per_key) as mem_bytes_per_key_max,
        median(mem_usage_bytes_per_key) as mem_usage_bytes_per_key,
        median(mem_bytes_per_payload_byte) as mem_bytes_per_payload_byte,
        median(mem_usage_over_actual) as mem_usage_over_actual,
        median(mem_usage_all_over_actual) as mem_usage_all_over_actual,
        median(mem_formula_over_actual) as mem_formula_over_actual,
        median(mem_samples_default_over_all) as mem_samples_default_over_all,
        median(mem_removal_recovered_share) as mem_removal_recovered_share,
    from rep_figures
    group by run_id, env, shape
),

inputs as (
    select
        run_id,
        env,
        shape,
        any_value(elements_per_key) as elements_per_key,
        any_value(payload_per_key) as payload_per_key,
        any_value(key_name_bytes) as key_name_bytes,
        any_value(value_bytes_per_element) as value_bytes_per_element,
        max(settle_s) as settle_max_s,
        greatest(max(settle_returned_bytes), 0) as settle_returned_max_bytes,
        any_value(formula_per_key) as formula_per_key,
        any_value(formula_overhead_bytes) as formula_overhead_bytes,
        median(usage_all_mean_bytes) filter (where clean) as usage_all_per_key,
        mode(encoding) as encoding,
        count(*) as repetitions,
    from repetitions
    group by run_id, env, shape
)

select
    m.*,
    i.elements_per_key,
    i.payload_per_key,
    i.key_name_bytes,
    i.value_bytes_per_element,
    i.settle_max_s,
    i.settle_returned_max_bytes,
    i.formula_per_key,
    i.formula_overhead_bytes,
    i.usage_all_per_key,
    i.encoding,
    i.repetitions,
from medians as m
join inputs as i on i.run_id = m.run_id and i.env = m.env and i.shape = m.shape
