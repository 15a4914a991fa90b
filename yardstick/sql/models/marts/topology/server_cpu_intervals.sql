/* The server's CPU between two fingerprinted runs: one row per environment and fingerprinted
   run of the batch that has an earlier one of the same server run (a restart starts over),
   INFO used_cpu_sys + used_cpu_user difference over the time between the two runs. The
   batch's first run of a server is differenced against the state server_cpu_last. */
{% set prior = prior_relation('server_cpu_last') if is_incremental() else none %}

with fresh as (
    select e.run_id, e.env, e.server_run_id, e.server_cpu_s, r.started_at, false as is_prior,
    from ({{ in_batch(ref('env_facts'), alias='e') }}) as e
    join {{ ref('stg_runs_batch') }} as r on r.run_id = e.run_id and r.env = e.env
    where e.server_cpu_s is not null and e.server_run_id is not null
),

prior as (
    {% if prior %}
    select p.run_id, p.env, p.server_run_id, p.server_cpu_s, p.started_at, true as is_prior,
    from {{ prior }} as p
    semi join fresh as f on f.env = p.env and f.server_run_id = p.server_run_id
    {% else %}
    select * from fresh where false
    {% endif %}
),

readings as (
    select * from prior
    union all
    select * from fresh
),

paired as (
    select
        *,
        lag(run_id) over w as prev_run_id,
        lag(server_cpu_s) over w as prev_cpu_s,
        lag(started_at) over w as prev_started_at,
    from readings
    window w as (partition by env, server_run_id order by started_at, run_id)
)

select
    run_id,
    env,
    server_run_id,
    prev_run_id,
    started_at,
    epoch(started_at) - epoch(prev_started_at) as interval_s,
    server_cpu_s - prev_cpu_s as cpu_s,
    (server_cpu_s - prev_cpu_s) / nullif(epoch(started_at) - epoch(prev_started_at), 0)
        as cpu_share,               /* CPU seconds per second: 1 = one core busy */
from paired
where not is_prior and prev_run_id is not null
