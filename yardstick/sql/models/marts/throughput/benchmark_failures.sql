/* One row per benchmark cell and repetition that failed or timed out (run, environment):
   kept across history, so every run's report lists its own. A cell cut by a stop or the
   family's bound (status interrupted) is no failure: the step's reason names it. */
select run_id, env, cell, repetition, test, error
from {{ ref('stg_benchmark') }}
where status not in ('ok', 'interrupted')
