/* What each environment was made of at each run and collection: one row per environment and
   run, CLUSTER INFO and a Sentinel's view, with the conditions a report names (a resharding
   in progress, slots not served, nodes down, replicas not syncing). */
with shapes as (
    select * from {{ ref('stg_topology') }}
),

nodes as (
    select * from {{ ref('stg_topology_nodes') }}
),

node_conditions as (
    select
        run_id,
        env,
        /* A node not online (failed, pfail, loading, unreachable ...), named with its state. */
        string_agg(address || ' (' || coalesce(health, 'unknown') || ')', ', ' order by address)
            filter (where health is distinct from 'online') as nodes_down_named,
        /* A replica whose link to its primary is not up, or that is itself not online. */
        count(*) filter (
            where role = 'replica'
            and (health is distinct from 'online' or master_link_status is distinct from 'up')
        ) as replicas_not_syncing,
        string_agg(
            address || ' (' || case
                when (health is distinct from 'online') then coalesce(health, 'unknown')
                else 'link ' || coalesce(master_link_status, 'unknown')
            end || ')', ', ' order by address
        ) filter (
            where role = 'replica'
            and (health is distinct from 'online' or master_link_status is distinct from 'up')
        ) as replicas_not_syncing_named,
        max(lag_bytes) as max_lag_bytes,
        max(lag_s) as max_lag_s,
    from nodes
    group by run_id, env
)

select
    s.run_id,
    s.env,
    s.shape,
    s.sampled_at,
    s.cluster_state,
    s.slots_assigned,
    s.slots_ok,
    s.slots_pfail,
    s.slots_fail,
    case when s.shape = 'cluster' then 16384 - coalesce(s.slots_assigned, 0) end
        as slots_unassigned,
    s.known_nodes,
    s.cluster_size,
    s.current_epoch,
    s.primaries,
    s.replicas,
    s.nodes_down,
    c.nodes_down_named,
    s.migrating_slots,
    s.importing_slots,
    /* Slots moving between primaries: keys and load move with them, so shard balance and
       per-node figures of this run describe a cluster between two shapes. */
    coalesce(s.migrating_slots, 0) + coalesce(s.importing_slots, 0) > 0 as resharding,
    coalesce(c.replicas_not_syncing, 0) as replicas_not_syncing,
    c.replicas_not_syncing_named,
    c.max_lag_bytes,
    c.max_lag_s,
    s.sentinel_master,
    s.sentinel_master_address,
    s.sentinel_flags,
    s.sentinel_quorum,
    s.sentinel_other_sentinels,
    s.sentinel_replicas,
    s.sentinels_configured,
    s.sentinel_answered_by,
    s.sentinel_failover_state,
    s.problems,
from shapes as s
left join node_conditions as c on c.run_id = s.run_id and c.env = s.env
