/* One row per cluster, full run and key prefix: keys and bytes over the whole cluster, and
   how the prefix's keys sit on the shards (each primary's own estimate). */
with cluster as (
    select
        run_id, env, subject as prefix,
        max(value) filter (where figure = 'cluster_prefix_keys') as prefix_keys,
        max(value) filter (where figure = 'cluster_prefix_bytes') as prefix_bytes,
        max(value) filter (where figure = 'cluster_prefix_share_of_used_memory')
            as share_of_used_memory,
    from {{ ref('figures') }}
    where figure in (
        'cluster_prefix_keys', 'cluster_prefix_bytes', 'cluster_prefix_share_of_used_memory'
    )
    group by run_id, env, subject
),

primaries as (
    select run_id, env, member, address,
    from {{ ref('topology_members') }}
    where role = 'primary'
),

per_shard as (
    select
        p.run_id, p.env, f.subject as prefix,
        string_agg(p.address || ' ' || round(f.value)::bigint, ', ' order by p.address)
            as keys_by_shard,
    from primaries as p
    join {{ ref('figures') }} as f on f.run_id = p.run_id and f.env = p.member
    where f.figure = 'ks_prefix_keys_estimated'
    group by p.run_id, p.env, f.subject
)

select c.*, s.keys_by_shard,
from cluster as c
left join per_shard as s on s.run_id = c.run_id and s.env = c.env and s.prefix = c.prefix
order by c.run_id, c.env, c.prefix_bytes desc nulls last, c.prefix
