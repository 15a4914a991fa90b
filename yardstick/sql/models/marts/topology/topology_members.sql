/* Every server of every environment at each run and collection: one row per environment,
   run and server, its role, shard, slots, health and lag, and (full runs) what its own
   fingerprint said of it: keys in db0, used_memory, server run id and CPU time. */
with nodes as (
    select * from {{ ref('stg_topology_nodes') }}
),

facts as (
    {{ in_batch(ref('env_facts'), alias='e') }}
)

select
    n.run_id,
    n.env,
    n.member,
    n.address,
    n.node_id,
    n.role,
    n.primary_address,
    n.shard,
    n.slots,
    n.slot_ranges,
    n.flags,
    n.link_state,
    n.config_epoch,
    n.health,
    n.migrating_slots,
    n.importing_slots,
    n.sampled_at,
    n.repl_offset,
    n.lag_bytes,
    n.lag_s,
    n.master_link_status,
    n.master_last_io_s,
    n.connected_replicas,
    n.problem,
    (n.health is distinct from 'online') as is_down,
    n.role = 'replica' and (
        (n.health is distinct from 'online') or (n.master_link_status is distinct from 'up')
    ) as not_syncing,
    f.server_label,
    f.server_run_id,
    f.db0_keys,                 /* INFO keyspace at the member's fingerprint */
    f.used_memory_bytes,
    f.server_cpu_s,
from nodes as n
left join facts as f on f.run_id = n.run_id and f.env = n.member
