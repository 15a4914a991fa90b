/* One line per benchmark cell and repetition that failed or timed out (batch only), shown in
   the report instead of silently missing. */
select run_id, env, cell, repetition, test, error
from {{ ref('stg_benchmark') }}
where status <> 'ok'
order by cell, repetition
