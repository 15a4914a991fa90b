/* One row per benchmark cell and repetition that failed or timed out (run, environment):
   kept across history, so every run's report lists its own. */
select run_id, env, cell, repetition, test, error
from {{ ref('stg_benchmark') }}
where status <> 'ok'
