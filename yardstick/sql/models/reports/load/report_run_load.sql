/* One row per run and environment: whether the host was saturated (run_load). */
select * from {{ ref('run_load') }}
