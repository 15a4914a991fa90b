/* One row per run, environment and O(N) command, slowest first. */
select * from {{ ref('slow_command_stats') }}
order by run_id, env, median_us desc
