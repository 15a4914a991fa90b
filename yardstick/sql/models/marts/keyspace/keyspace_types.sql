/* One row per scan (run, environment) and key type, as redis-cli --bigkeys and --memkeys
   summarize: keys, elements, bytes, and the biggest key each way. Aggregates only, never a
   sort of the type's keys: the largest sizes first, then the first key by name among the
   keys of that size (ties go to it, so a rebuild shows the same one). The biggest by
   elements is chosen only among keys whose element count was read (none before Redis 7.2 on
   a read-only server: the length commands would touch the keys), else none is named. */
with keys as not materialized (
    /* Read in place by each aggregate below: a materialized copy of every key (DuckDB's
       default for a CTE read twice) costs more than reading them twice. */
    select * from {{ ref('stg_keyspace_keys') }}
),

per_type as (
    select
        run_id,
        env,
        type,
        count(*) as keys,
        sum(elements) as elements,
        count(elements) as elements_read,   /* keys whose element count was read */
        sum(memory_usage_bytes) as memory_usage_bytes,
        avg(memory_usage_bytes) as mean_bytes,
        max(elements) as max_elements,
        max(memory_usage_bytes) as max_bytes,
    from keys
    group by run_id, env, type
),

biggest as (
    /* Keys of the largest size (every key of the type where no size is known: the first by
       name, as an order by size with unknown sizes last gives). The sizes are join
       conditions: only the keys of the largest size are read past the scan. */
    select k.run_id, k.env, k.type, 'elements' as size, min(k.key) as key,
    from keys as k
    join per_type as t
        on t.run_id = k.run_id and t.env = k.env and t.type is not distinct from k.type
        and k.elements = t.max_elements
    group by k.run_id, k.env, k.type
    union all
    select k.run_id, k.env, k.type, 'bytes' as size, min(k.key) as key,
    from keys as k
    join per_type as t
        on t.run_id = k.run_id and t.env = k.env and t.type is not distinct from k.type
        and k.memory_usage_bytes = t.max_bytes
    group by k.run_id, k.env, k.type
    union all
    select k.run_id, k.env, k.type, 'bytes' as size, min(k.key) as key,
    from keys as k
    join per_type as t
        on t.run_id = k.run_id and t.env = k.env and t.type is not distinct from k.type
        and t.max_bytes is null
    group by k.run_id, k.env, k.type
)

select
    t.run_id,
    t.env,
    t.type,
    t.keys,
    t.elements,
    t.elements_read,
    t.memory_usage_bytes,
    t.mean_bytes,
    e.key as biggest_by_elements,
    t.max_elements,
    b.key as biggest_by_bytes,
    t.max_bytes,
from per_type as t
left join biggest as e
    on e.run_id = t.run_id and e.env = t.env and e.type is not distinct from t.type
    and e.size = 'elements'
left join biggest as b
    on b.run_id = t.run_id and b.env = t.env and b.type is not distinct from t.type
    and b.size = 'bytes'
