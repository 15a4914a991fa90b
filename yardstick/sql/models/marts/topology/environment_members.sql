/* Which environments are servers of another (a cluster's nodes, a primary's replicas): one
   row per member environment, the environment it belongs to and its latest role. Reports
   list configured environments only and show members inside their environment's report. */
{{ config(incremental_strategy='delete+insert', unique_key='member') }}

with named as (
    /* The environment's topology names each member; a member's fingerprint names its
       environment (also when the environment's own topology was not read). */
    select n.member, n.env as member_of, n.role, n.address, r.started_at, n.run_id,
    from {{ ref('stg_topology_nodes') }} as n
    join {{ ref('stg_runs_batch') }} as r on r.run_id = n.run_id and r.env = n.env
    where n.member is not null and n.member <> n.env
    union all
    select e.env, e.member_of, e.node_role, e.server_address, r.started_at, e.run_id,
    from ({{ in_batch(ref('env_facts'), alias='e') }}) as e
    join {{ ref('stg_runs_batch') }} as r on r.run_id = e.run_id and r.env = e.env
    where e.member_of is not null
)

select member, member_of, role, address, started_at as seen_at, run_id,
from named
qualify row_number() over (partition by member order by started_at desc, run_id desc) = 1
