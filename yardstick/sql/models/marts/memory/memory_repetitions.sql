/* One row per run, environment, memory shape and repetition: used_memory before, after and
   after removal of the load, MEMORY USAGE of sampled keys, and whether only the tool wrote
   meanwhile (`clean`); what was written per key (key name length, value bytes per element),
   and how long the wait before "before" took for used_memory to stop falling. */
with readings as (
    select
        run_id,
        env,
        shape,
        repetition,
        max(used_memory_bytes) filter (where phase = 'before') as before_bytes,
        max(used_memory_bytes) filter (where phase = 'after') as after_bytes,
        max(used_memory_bytes) filter (where phase = 'removed') as removed_bytes,
        max(used_memory_rss_bytes) filter (where phase = 'after') as rss_after_bytes,
        max(mem_fragmentation_ratio) filter (where phase = 'before') as fragmentation_before,
        max(mem_fragmentation_ratio) filter (where phase = 'after') as fragmentation_after,
        max(mem_clients_normal_bytes) filter (where phase = 'after')
            - max(mem_clients_normal_bytes) filter (where phase = 'before') as clients_delta_bytes,
        max(dbsize) filter (where phase = 'before') as dbsize_before,
        max(dbsize) filter (where phase = 'after') as dbsize_after,
        max(dbsize) filter (where phase = 'removed') as dbsize_removed,
        min(taken_at) filter (where phase <> 'settle') as first_taken_at,
        /* The wait before "before" until used_memory stopped falling (runs that did not wait
           have no settle reading: null). */
        epoch(
            max(taken_at) filter (where phase = 'before')
            - max(taken_at) filter (where phase = 'settle')
        )
            as settle_s,
        max(used_memory_bytes) filter (where phase = 'settle')
            - max(used_memory_bytes) filter (where phase = 'before') as settle_returned_bytes,
    from {{ ref('stg_memory_readings') }}
    group by run_id, env, shape, repetition
),

usage as (
    select
        run_id,
        env,
        shape,
        repetition,
        count(*) as usage_keys,
        avg(memory_usage_bytes) as usage_mean_bytes,
        avg(memory_usage_all_bytes) as usage_all_mean_bytes,
        avg(payload_bytes) as usage_payload_mean_bytes,
        sum(memory_usage_bytes) / nullif(sum(memory_usage_all_bytes), 0)
            as samples_default_over_all,
        mode(encoding) as encoding,
    from {{ ref('stg_memory_usage_samples') }}
    group by run_id, env, shape, repetition
)

select
    l.run_id,
    l.env,
    l.shape,
    l.repetition,
    l.type,
    l.keys,
    l.elements_per_key,
    l.formula_overhead_bytes,
    l.load_s,
    r.before_bytes,
    r.after_bytes,
    r.removed_bytes,
    r.rss_after_bytes,
    r.fragmentation_before,
    r.fragmentation_after,
    r.clients_delta_bytes,
    r.first_taken_at,
    r.settle_s,
    r.settle_returned_bytes,
    u.usage_keys,
    u.usage_mean_bytes,
    u.usage_all_mean_bytes,
    u.samples_default_over_all,
    u.encoding,
    (r.after_bytes - r.before_bytes) / l.keys as bytes_per_key,
    /* The key name's length (all of a shape's names have one length) and the bytes of each
       element's value (field name included for hashes; a mean where sizes vary). */
    l.key_bytes / l.keys as key_name_bytes,
    l.value_bytes / (l.keys * l.elements_per_key) as value_bytes_per_element,
    (l.key_bytes + l.value_bytes) / l.keys as payload_per_key,
    (l.key_bytes + l.value_bytes) / l.keys + l.formula_overhead_bytes as formula_per_key,
    /* How much of the difference came back on removal: near 1 when nothing else moved. */
    (r.after_bytes - r.removed_bytes) / nullif(r.after_bytes - r.before_bytes, 0)
        as removal_recovered_share,
    /* Only the tool wrote meanwhile: exactly its keys appeared, and went. */
    coalesce(
        r.dbsize_after - r.dbsize_before = l.keys and r.dbsize_removed = r.dbsize_before,
        false
    ) as clean,
from {{ ref('stg_memory_loads') }} as l
join readings as r
    on r.run_id = l.run_id and r.env = l.env and r.shape = l.shape
    and r.repetition = l.repetition
left join usage as u
    on u.run_id = l.run_id and u.env = l.env and u.shape = l.shape
    and u.repetition = l.repetition
