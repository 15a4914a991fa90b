/* One row per scan (run, environment), ranking (bytes | elements) and rank: the biggest keys
   by elements (what makes an O(N) command slow; aggregates only, a string's "elements" are
   its bytes) and by bytes (what fills memory): they differ. */
with ranked as (
    select
        k.*,
        s.top_keys,
        row_number() over (
            partition by k.run_id, k.env order by k.memory_usage_bytes desc nulls last, k.key
        ) as rank_bytes,
        row_number() over (
            partition by k.run_id, k.env
            order by case when k.type <> 'string' then k.elements end desc nulls last, k.key
        ) as rank_elements,
    from {{ ref('stg_keyspace_keys') }} as k
    join {{ ref('stg_keyspace_scans') }} as s on s.run_id = k.run_id and s.env = k.env
)

select run_id, env, 'bytes' as ranked_by, rank_bytes as rank, key, prefix, type, encoding,
       elements, memory_usage_bytes,
from ranked
where rank_bytes <= top_keys
union all
select run_id, env, 'elements' as ranked_by, rank_elements as rank, key, prefix, type,
       encoding, elements, memory_usage_bytes,
from ranked
where rank_elements <= top_keys and type <> 'string' and elements is not null
