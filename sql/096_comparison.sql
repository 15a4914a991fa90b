/* Comparison across environments: each environment's latest full run (collections excluded),
   its figures, and a group key that puts same_server_as pairs side by side. */
create or replace view comparison as
with latest_runs as (
    select run_id, env, started_at, mode, status, same_server_as
    from stg_runs
    where profile <> 'collect'
    qualify row_number() over (partition by env order by started_at desc, run_id desc) = 1
)

select
    f.env, f.figure, f.subject, f.family, f.position, f.value, f.unit, f.nature,
    f.not_transferable_because, f.n, f.noisy, f.run_id,
    l.started_at, l.mode, l.status,
    coalesce(l.same_server_as, l.env) as pair_group,
from latest_runs as l
join figures as f on f.run_id = l.run_id and f.env = l.env;

create or replace view comparison_environments as
with latest_runs as (
    select run_id, env, started_at, mode, status, same_server_as, transport
    from stg_runs
    where profile <> 'collect'
    qualify row_number() over (partition by env order by started_at desc, run_id desc) = 1
)

select
    l.env, l.run_id, l.started_at, l.mode, l.status, l.transport, l.same_server_as,
    e.redis_version, e.server_cores, e.prober_load_1m,
    coalesce(l.same_server_as, l.env) as pair_group,
from latest_runs as l
left join env_facts as e on e.run_id = l.run_id and e.env = l.env
order by pair_group, l.same_server_as nulls first, l.env;

create or replace view report_changes as
/* What moved in a run beyond noise, for that environment's report. */
select run_id, env, figure, subject, value, unit, nature, baseline_median, baseline_n,
       change_share, verdict
from changes
where verdict not in ('steady', 'new')
order by verdict, figure, subject;
