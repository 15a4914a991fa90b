/* One row per environment and full run: what the environment was made of (shape, CLUSTER
   INFO, a Sentinel's view) with the conditions a report names, and whether the Sentinels
   named another master than at the previous run (a failover), and what changed in its
   servers since the previous run (topology_changes: one sentence per change). */
select
    t.*,
    e.sentinel_failover,
    e.previous_master_address,
    e.environment_changed,
    c.topology_change,
from {{ ref('topology_runs') }} as t
join {{ ref('runs') }} as r on r.run_id = t.run_id and r.env = t.env
left join {{ ref('run_environment') }} as e on e.run_id = t.run_id and e.env = t.env
left join {{ ref('topology_changes') }} as c on c.run_id = t.run_id and c.env = t.env
where {{ is_full_run('r.profile') }}
