/* Comparison across environments: one row per environment, figure and subject of each
   environment's latest full run, with a group key that puts same_server_as pairs side by
   side. */
with latest_runs as (
    /* Configured environments only: a cluster's nodes and a primary's replicas are shown in
       their environment's report, not compared as environments of their own. */
    select l.*,
    from {{ ref('latest_full_runs') }} as l
    anti join {{ ref('environment_members') }} as m on m.member = l.env
)

select
    f.env, f.figure, f.subject, f.family, f.position, f.value, f.unit, f.nature,
    f.not_transferable_because, f.n, f.noisy, f.run_id,
    l.started_at, l.mode, l.status,
    coalesce(l.same_server_as, l.env) as pair_group,
    /* Below its instrument's floor: shown as this text, not as the value. */
    case when f.value < i.floor_value then i.shown_as end as shown_as,
from latest_runs as l
join {{ ref('figures') }} as f on f.run_id = l.run_id and f.env = l.env
left join {{ ref('instrument_floors') }} as i on i.figure = f.figure
/* A shard's or a replica's own ratio is named by its address: no other environment has it
   (each environment's balance and key space figures are compared instead). */
where f.figure not like 'shard\_%\_over\_mean' escape '\'
    and f.figure not like 'replica\_%' escape '\'
