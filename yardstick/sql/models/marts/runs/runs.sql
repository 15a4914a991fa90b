/* Runs across history: one row per environment per run. Named stg_ like the view it replaced:
   reports and the CLI read runs that may predate this update's batch. */
select * from {{ ref('stg_runs_batch') }}
