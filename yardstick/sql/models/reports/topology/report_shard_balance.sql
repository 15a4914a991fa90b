/* One row per cluster, full run and balance dimension (keys, bytes, ops, cpu): largest shard
   ÷ mean, and the shard that is largest, named by its primary's address and member. */
with balance as (
    select run_id, env, figure, value, samples as shards,
           regexp_extract(figure, '^shard_(.*)_balance$', 1) as dimension,
    from {{ ref('figures') }}
    where figure like 'shard\_%\_balance' escape '\'
),

per_shard as (
    select run_id, env, subject as shard, value,
           regexp_extract(figure, '^shard_(.*)_over_mean$', 1) as dimension,
    from {{ ref('figures') }}
    where figure like 'shard\_%\_over\_mean' escape '\'
),

largest as (
    select run_id, env, dimension, arg_max(shard, (value, shard)) as largest_shard,
    from per_shard
    group by run_id, env, dimension
)

select
    b.run_id,
    b.env,
    b.dimension,
    b.figure,
    b.value,
    b.shards,
    l.largest_shard,
    n.member as largest_member,
from balance as b
left join largest as l on l.run_id = b.run_id and l.env = b.env and l.dimension = b.dimension
left join {{ ref('topology_members') }} as n
    on n.run_id = b.run_id and n.env = b.env and n.address = l.largest_shard
order by b.run_id, b.env, case b.dimension when 'keys' then 1 when 'bytes' then 2
    when 'ops' then 3 else 4 end
