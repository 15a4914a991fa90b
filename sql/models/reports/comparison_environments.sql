/* The environments compared: one row per environment (its latest full run and facts),
   same_server_as pairs next to each other. */
with latest_runs as (
    select * from {{ ref('latest_full_runs') }}
)

select
    l.env, l.run_id, l.started_at, l.mode, l.status, l.transport, l.same_server_as,
    e.redis_version, e.server_label, e.server_cores, e.prober_load_1m,
    coalesce(l.same_server_as, l.env) as pair_group,
from latest_runs as l
left join {{ ref('env_facts') }} as e on e.run_id = l.run_id and e.env = l.env
order by pair_group, l.same_server_as nulls first, l.env
