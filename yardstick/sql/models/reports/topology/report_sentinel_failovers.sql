/* One row per Sentinel-managed environment's failover (the Sentinels named another master
   than at the run before), listed with the environment's latest full run so its report
   shows every failover of its history. */
select
    l.run_id,
    l.env,
    e.run_id as failover_run_id,
    e.started_at as failover_seen_at,
    e.previous_master_address,
    e.sentinel_master_address,
from {{ ref('latest_full_runs') }} as l
join {{ ref('run_environment') }} as e on e.env = l.env
where e.sentinel_failover
order by l.env, e.started_at desc
