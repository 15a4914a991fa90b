/* State, one row per environment: its latest fingerprinted run's server CPU reading, which
   server_cpu_intervals of the next update differences against (read there through
   prior_relation, before this is updated). */
{{ config(incremental_strategy='delete+insert', unique_key='env') }}
-- depends_on: {{ ref('server_cpu_intervals') }}

with readings as (
    select e.run_id, e.env, e.server_run_id, e.server_cpu_s, r.started_at,
    from ({{ in_batch(ref('env_facts'), alias='e') }}) as e
    join {{ ref('stg_runs_batch') }} as r on r.run_id = e.run_id and r.env = e.env
    where e.server_cpu_s is not null and e.server_run_id is not null
)

select * from readings
qualify row_number() over (partition by env order by started_at desc, run_id desc) = 1
