/* One row per scan (run, environment) and key type, as redis-cli --bigkeys and --memkeys
   summarize: keys, elements, bytes, and the biggest key each way. */
select
    run_id,
    env,
    type,
    count(*) as keys,
    sum(elements) as elements,
    sum(memory_usage_bytes) as memory_usage_bytes,
    avg(memory_usage_bytes) as mean_bytes,
    /* Ties go to the first key by name, so a rebuild shows the same one. */
    first(key order by elements desc nulls last, key) as biggest_by_elements,
    max(elements) as max_elements,
    first(key order by memory_usage_bytes desc nulls last, key) as biggest_by_bytes,
    max(memory_usage_bytes) as max_bytes,
from {{ ref('stg_keyspace_keys') }}
group by run_id, env, type
