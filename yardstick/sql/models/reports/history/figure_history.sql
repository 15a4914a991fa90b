/* Kept for queries written against the first schema: one row per run of each series. */
select
    env, figure, subject, started_at, run_id, value, unit, nature, n, min_value, max_value,
    redis_version, server_cores, transport, prober_load_1m, environment_changed,
from {{ ref('figure_trends') }}
