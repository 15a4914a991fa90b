/* One row per contention experiment (run, environment). */
select * from {{ ref('contention_stats') }}
