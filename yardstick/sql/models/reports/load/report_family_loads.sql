/* One row per run, environment and family: the host's load while it ran (family_loads). */
select * from {{ ref('family_loads') }}
