/* One row per instrument agreement run (run, environment). */
select * from {{ ref('agreement_stats') }}
