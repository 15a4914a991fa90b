/* One row per environment and run whose servers changed since its previous fingerprinted run
   (a failover, a node added or removed, slots moving): the sentences its report opens with. */
select
    run_id,
    env,
    topology_change,
from {{ ref('topology_changes') }}
