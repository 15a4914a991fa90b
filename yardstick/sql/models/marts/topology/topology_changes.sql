/* What changed in an environment's servers since its previous fingerprinted run: one row per
   batch run and environment concerned (the configured environment, and each member whose
   role changed, that was added, or that moves slots), each change stated in one sentence.
   A failover (a primary that changed), a node added or removed, slots migrating or importing
   on any node: run_environment makes each an environment change, never a regression. */
with batch_envs as (
    select distinct env, from {{ source('lake', 'batch_runs') }}
),

readings as (
    /* The environment's runs that were fingerprinted (full runs) and read a topology. */
    select t.run_id, t.env, t.sampled_at,
    from {{ ref('topology_runs') }} as t
    semi join batch_envs as b on b.env = t.env
    semi join {{ ref('env_facts') }} as e on e.run_id = t.run_id and e.env = t.env
),

paired as (
    select
        run_id, env,
        lag(run_id) over (partition by env order by sampled_at, run_id) as previous_run_id,
    from readings
),

batch as (
    select p.*,
    from paired as p
    semi join {{ source('lake', 'batch_runs') }} as b on b.run_id = p.run_id and b.env = p.env
),

nodes as (
    select n.run_id, n.env, n.address, n.member, n.role, n.migrating_slots, n.importing_slots,
    from {{ ref('topology_members') }} as n
    semi join batch_envs as b on b.env = n.env
),

now_nodes as (
    select b.run_id, b.env, n.address, n.member, n.role, n.migrating_slots, n.importing_slots,
    from batch as b
    join nodes as n on n.run_id = b.run_id and n.env = b.env
),

was_nodes as (
    select b.run_id, b.env, n.address, n.member, n.role,
    from batch as b
    join nodes as n on n.run_id = b.previous_run_id and n.env = b.env
),

compared as (
    /* Every server of this run or the previous one, side by side by address. */
    select
        b.run_id,
        b.env,
        coalesce(a.address, w.address) as address,
        coalesce(a.member, w.member) as member,
        a.role,
        w.role as previous_role,
        coalesce(a.migrating_slots, 0) as migrating_slots,
        coalesce(a.importing_slots, 0) as importing_slots,
        b.previous_run_id is not null as has_previous,
    from now_nodes as a
    full join was_nodes as w
        on w.run_id = a.run_id and w.env = a.env and w.address = a.address
    join batch as b on b.run_id = coalesce(a.run_id, w.run_id) and b.env = coalesce(a.env, w.env)
),

facts as (
    select
        *,
        has_previous and role is not null and previous_role is not null
            and role <> previous_role as role_changed,
        has_previous and previous_role is null and role is not null as added,
        has_previous and role is null and previous_role is not null as removed,
        migrating_slots + importing_slots > 0 as moving,
    from compared
),

environment_sentences as (
    select
        run_id,
        env,
        concat_ws(' ',
            'Failover since the previous run: '
            || string_agg(
                address || ' is a ' || role || ' now (a ' || previous_role || ' before)',
                ', ' order by role, address
            ) filter (where role_changed) || '.',
            'Nodes added since the previous run: '
            || string_agg(address, ', ' order by address) filter (where added) || '.',
            'Nodes removed since the previous run: '
            || string_agg(address, ', ' order by address) filter (where removed) || '.',
            'Slots moving between primaries: '
            || string_agg(
                address || ' ' || concat_ws(
                    ' and ',
                    case when migrating_slots > 0 then 'migrating ' || migrating_slots end,
                    case when importing_slots > 0 then 'importing ' || importing_slots end
                ), ', ' order by address
            ) filter (where moving) || '.'
        ) as sentences,
    from facts
    group by run_id, env
),

member_sentences as (
    select
        run_id,
        member as env,
        concat_ws(' ',
            case when role_changed then
                'This server is a ' || role || ' now, a ' || previous_role
                || ' at the previous run (a failover).'
            end,
            case when added then 'This server joined ' || env || ' since the previous run.' end,
            case when moving then
                'This server is moving slots: ' || concat_ws(
                    ' and ',
                    case when migrating_slots > 0 then migrating_slots || ' migrating' end,
                    case when importing_slots > 0 then importing_slots || ' importing' end
                ) || '.'
            end
        ) as sentences,
    from facts
    where member is not null and member <> env and role is not null
        and (role_changed or added or moving)
),

changes as (
    select run_id, env, sentences, from environment_sentences
    union all
    select run_id, env, sentences, from member_sentences
)

select
    run_id,
    env,
    true as topology_changed,
    sentences as topology_change,  /* one sentence per change */
from changes
where sentences <> ''
