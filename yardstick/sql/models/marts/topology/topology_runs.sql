/* What each environment was made of at each run and collection: one row per environment and
   run, CLUSTER INFO and a Sentinel's view, with the conditions a report names (a resharding
   in progress, slots not served, nodes down at the end of the run, replicas not syncing,
   replicas further behind than the environment's lag thresholds). */
with shapes as (
    select * from {{ ref('stg_topology') }}
),

nodes as (
    {{ in_batch(ref('topology_members'), alias='m') }}
),

node_conditions as (
    select
        run_id,
        env,
        /* A node not online at the end of the run (failed, pfail, loading, unreachable ...),
           named with its state (and the family it was lost at, when during the run). */
        count(*) filter (where is_down) as nodes_down_at_end,
        string_agg(
            address || ' (' || coalesce(health_at_end, 'unknown')
            || coalesce(', lost during ' || lost_at_family, '') || ')',
            ', ' order by address
        ) filter (where is_down) as nodes_down_named,
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
        /* Replicas beyond either lag threshold, each with its lag and the thresholds. */
        count(*) filter (where lagging) as replicas_lagging,
        string_agg(
            address || ' (' || coalesce(format('{:,}', lag_bytes), '?') || ' bytes, '
            || coalesce(lag_s::varchar, '?') || ' s behind '
            || coalesce(primary_address, 'its primary') || ')', ', ' order by address
        ) filter (where lagging) as replicas_lagging_named,
        any_value(lag_max_bytes) as lag_max_bytes,
        any_value(lag_max_s) as lag_max_s,
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
    greatest(s.nodes_down, coalesce(c.nodes_down_at_end, 0)) as nodes_down,
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
    coalesce(c.replicas_lagging, 0) as replicas_lagging,
    c.replicas_lagging_named,
    c.lag_max_bytes,
    c.lag_max_s,
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
