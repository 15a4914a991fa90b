/* The environments compared: one row per environment (its latest full run and facts),
   same_server_as pairs next to each other. */
with latest_runs as (
    /* Configured environments only: a cluster's nodes and a primary's replicas are shown in
       their environment's report, not compared as environments of their own. */
    select l.*,
    from {{ ref('latest_full_runs') }} as l
    anti join {{ ref('environment_members') }} as m on m.member = l.env
)

select
    l.env, l.run_id, l.started_at, l.mode, l.status, l.transport, l.same_server_as,
    e.redis_version, e.server_label, e.server_cores, e.prober_load_1m,
    coalesce(l.same_server_as, l.env) as pair_group,
from latest_runs as l
left join {{ ref('env_facts') }} as e on e.run_id = l.run_id and e.env = l.env
order by pair_group, l.same_server_as nulls first, l.env
