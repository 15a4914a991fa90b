/* One line per benchmark cell and repetition that failed or timed out, shown in the report
   instead of silently missing. */
select run_id, env, cell, repetition, test, error
from {{ ref('benchmark_failures') }}
order by cell, repetition
