/* One row per commandstats snapshot (run, environment) and command called in its interval:
   which commands cost the server most since the previous snapshot. */
select
    run_id,
    env,
    command,
    interval_s,
    calls_delta as calls,
    calls_delta / interval_s as calls_per_s,
    usec_delta,
    usec_delta / nullif(calls_delta, 0) as usec_per_call,
    usec_delta / nullif(sum(usec_delta) over (partition by run_id, env), 0)
        as share_of_server_time,
    failed_calls_delta as failed_calls,
    rejected_calls_delta as rejected_calls,
    row_number() over (partition by run_id, env order by usec_delta desc, command) as cost_rank,
from {{ ref('counter_intervals') }}
where not counters_reset and interval_s > 0 and calls_delta > 0
order by run_id, env, cost_rank
