/* Every server of every environment at each run and collection: one row per environment,
   run and server, its role, shard, slots, health and lag, its state at the end of the run,
   and (full runs) what its own fingerprint said of it: keys in db0, used_memory, server run
   id and CPU time. */
with nodes as (
    select * from {{ ref('stg_topology_nodes') }}
),

thresholds as (
    /* The lag thresholds the run was measured with; runs from before they were recorded
       get the defaults (yardstick/access/environment.py replica_lag_max_*). */
    select
        run_id, env,
        coalesce(replica_lag_max_bytes, 10000000) as lag_max_bytes,
        coalesce(replica_lag_max_s, 30.0) as lag_max_s,
    from {{ ref('stg_topology') }}
),

lost as (
    /* A member that stopped answering during the run: a later family was not attempted
       because it was unreachable, or failed on the connection. Topology is read first,
       so its health says nothing of the end of the run. */
    select s.run_id, s.env,
           arg_max(s.family, s.started_at) as lost_at_family,
    from {{ ref('stg_steps_batch') }} as s
    where s.reason like 'not attempted: server unreachable%'
        or regexp_matches(
            coalesce(s.reason, ''), '^(ConnectionError|TimeoutError|ConnectionRefusedError)'
        )
    group by s.run_id, s.env
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
    /* The member's state at the end of the run: its topology health, unless it stopped
       answering during the run. */
    case when l.run_id is not null and n.health = 'online' then 'unreachable'
         else n.health end as health_at_end,
    l.lost_at_family,
    (n.health is distinct from 'online') or l.run_id is not null as is_down,
    t.lag_max_bytes,
    t.lag_max_s,
    /* A replica further behind than the environment's thresholds. */
    n.role = 'replica' and (
        coalesce(n.lag_bytes > t.lag_max_bytes, false) or coalesce(n.lag_s > t.lag_max_s, false)
    ) as lagging,
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
left join thresholds as t on t.run_id = n.run_id and t.env = n.env
left join lost as l on l.run_id = n.run_id and l.env = n.member
