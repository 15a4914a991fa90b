/* Memory per key (subject = the shape): bytes per key from the used_memory difference, and
   how far MEMORY USAGE, MEMORY USAGE SAMPLES 0 and the classic formula
   keys x (key + value + 50) land from it. A ratio below 1 is an estimate that promises you
   will fit when you will not: the dangerous direction. Only repetitions during which
   exactly the tool's keys appeared and went count (`clean`). */
insert into figure_catalog values
    ('mem_bytes_per_key', 'memory', 300, 'bytes', 'absolute',
     'allocator, Redis version and build, key and value sizes of this run', 'lower',
     'used_memory after the load minus before, per key loaded'),
    ('mem_usage_bytes_per_key', 'memory', 301, 'bytes', 'absolute',
     'allocator, Redis version and build, key and value sizes of this run', null,
     'MEMORY USAGE (default samples) of sampled keys, mean'),
    ('mem_bytes_per_payload_byte', 'memory', 302, '×', 'ratio', null, 'lower',
     'bytes per key ÷ what was written (key + value bytes)'),
    ('mem_usage_over_actual', 'memory', 303, '×', 'ratio', null, null,
     'MEMORY USAGE ÷ bytes per key by difference (below 1: it promises room that is not there)'),
    ('mem_usage_all_over_actual', 'memory', 304, '×', 'ratio', null, null,
     'MEMORY USAGE SAMPLES 0 ÷ bytes per key by difference'),
    ('mem_formula_over_actual', 'memory', 305, '×', 'ratio', null, null,
     'keys × (key + value + 50) ÷ the difference (below 1: it promises room that is not there)'),
    ('mem_samples_default_over_all', 'memory', 306, '×', 'ratio', null, null,
     'MEMORY USAGE with default samples ÷ SAMPLES 0, aggregates only: the sampling error'),
    ('mem_removal_recovered_share', 'memory', 307, 'share', 'ratio', null, 'higher',
     'share of the difference returned when the keys were removed (a check on the reading)'),
    ('mem_fragmentation_ratio_empty', 'memory', 310, '×', 'absolute',
     'RSS and allocator state of this server; means nothing while used_memory is small', null,
     'mem_fragmentation_ratio before the first load (an almost empty server)'),
    ('mem_fragmentation_ratio_loaded', 'memory', 311, '×', 'absolute',
     'RSS and allocator state of this server; means nothing while used_memory is small', null,
     'mem_fragmentation_ratio with the largest shape loaded'),
    ('mem_used_memory_loaded_bytes', 'memory', 312, 'bytes', 'absolute',
     'this server and this dataset', null,
     'used_memory with the largest shape loaded: how small the dataset is');

create or replace table memory_rep_figures as
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
from memory_repetitions
where clean and bytes_per_key > 0;

/* One row per shape: the median over repetitions of every figure, and what went in. */
create or replace table memory_shapes as
with medians as (
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
    from memory_rep_figures
    group by run_id, env, shape
),

inputs as (
    select
        run_id,
        env,
        shape,
        any_value(elements_per_key) as elements_per_key,
        any_value(payload_per_key) as payload_per_key,
        any_value(formula_per_key) as formula_per_key,
        any_value(formula_overhead_bytes) as formula_overhead_bytes,
        median(usage_all_mean_bytes) filter (clean) as usage_all_per_key,
        mode(encoding) as encoding,
        count(*) as repetitions,
    from memory_repetitions
    group by run_id, env, shape
)

select
    m.*,
    i.elements_per_key,
    i.payload_per_key,
    i.formula_per_key,
    i.formula_overhead_bytes,
    i.usage_all_per_key,
    i.encoding,
    i.repetitions,
from medians as m
join inputs as i on i.run_id = m.run_id and i.env = m.env and i.shape = m.shape;

insert into measures by name
with per_rep as (
    unpivot memory_rep_figures
    on mem_bytes_per_key, mem_usage_bytes_per_key, mem_bytes_per_payload_byte,
       mem_usage_over_actual, mem_usage_all_over_actual, mem_formula_over_actual,
       mem_samples_default_over_all, mem_removal_recovered_share
    into name figure value value
),

run_level as (
    unpivot memory_shapes
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
    from memory_repetitions
    group by run_id, env
)

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
select run_id, env, 'mem_fragmentation_ratio_empty' as figure, '' as subject, fragmentation_empty as value
from loaded
union all by name
select run_id, env, 'mem_fragmentation_ratio_loaded' as figure, '' as subject, fragmentation_loaded as value
from loaded
union all by name
select run_id, env, 'mem_used_memory_loaded_bytes' as figure, '' as subject,
       used_memory_loaded_bytes::double as value
from loaded;

/* The report's table: the three numbers side by side, their ratios, and which way each
   estimate errs. */
create or replace view report_memory_shapes as
select
    *,
    abs(mem_usage_over_actual - 1) as usage_error_share,
    abs(mem_formula_over_actual - 1) as formula_error_share,
    case
        when mem_usage_over_actual < 1 then 'under: promises room that is not there (dangerous)'
        when mem_usage_over_actual > 1 then 'over: the safe side'
        else 'exact'
    end as usage_direction,
    case
        when mem_formula_over_actual < 1 then 'under: promises room that is not there (dangerous)'
        when mem_formula_over_actual > 1 then 'over: the safe side'
        else 'exact'
    end as formula_direction,
    case
        when mem_samples_default_over_all is null then null
        when mem_samples_default_over_all < 1 then 'default samples under-count'
        when mem_samples_default_over_all > 1 then 'default samples over-count'
        else 'no difference'
    end as samples_direction,
from memory_shapes
order by first_taken_at;

/* mem_fragmentation_ratio empty and loaded, with the size that decides whether it means
   anything: below ~100 MiB the process's fixed RSS dominates the ratio. */
create or replace view report_memory_fragmentation as
select
    run_id,
    env,
    arg_min(fragmentation_before, first_taken_at) as fragmentation_empty,
    arg_max(fragmentation_after, after_bytes) as fragmentation_loaded,
    max(after_bytes) as used_memory_loaded_bytes,
    arg_max(rss_after_bytes, after_bytes) as rss_loaded_bytes,
    max(after_bytes) < 100 * 1024 * 1024 as small_dataset,
    count(*) filter (not clean) as unclean_repetitions,
    max(abs(clients_delta_bytes)) as clients_delta_max_bytes,
from memory_repetitions
group by run_id, env;
