/* Comparison across environments: one row per environment, figure and subject of each
   environment's latest full run, with a group key that puts same_server_as pairs side by
   side. */
with latest_runs as (
    select * from {{ ref('latest_full_runs') }}
)

select
    f.env, f.figure, f.subject, f.family, f.position, f.value, f.unit, f.nature,
    f.not_transferable_because, f.n, f.noisy, f.run_id,
    l.started_at, l.mode, l.status,
    coalesce(l.same_server_as, l.env) as pair_group,
from latest_runs as l
join {{ ref('figures') }} as f on f.run_id = l.run_id and f.env = l.env
