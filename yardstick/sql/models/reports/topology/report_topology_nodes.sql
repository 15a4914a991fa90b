/* One row per environment, full run and server: the server's role, shard, slots, health and
   lag, its keys and used memory at its fingerprint, and its own figures of the same run
   (client round trip, server time per PING, SLOWLOG entries collected) with its verdict. */
with nodes as (
    select n.*,
    from {{ ref('topology_members') }} as n
    join {{ ref('runs') }} as r on r.run_id = n.run_id and r.env = n.env
    where {{ is_full_run('r.profile') }}
),

member_figures as (
    select
        f.run_id,
        f.env,
        max(f.value) filter (where f.figure = 'rtt_client_p50_us') as rtt_client_p50_us,
        max(f.value) filter (where f.figure = 'rtt_client_p99_us') as rtt_client_p99_us,
        max(f.value) filter (where f.figure = 'server_ping_usec_per_call')
            as server_ping_usec_per_call,
        max(f.value) filter (where f.figure = 'slowlog_entries_new') as slowlog_entries_new,
    from {{ ref('figures') }} as f
    semi join nodes as n on n.run_id = f.run_id and n.member = f.env
    where f.subject = ''
    group by f.run_id, f.env
),

member_steps as (
    select s.run_id, s.env,
           string_agg(s.family || ' ' || s.status, ', ' order by s.family)
               filter (where s.status not in ('ok', 'skipped')) as steps_not_ok,
    from {{ ref('steps') }} as s
    semi join nodes as n on n.run_id = s.run_id and n.member = s.env
    group by s.run_id, s.env
)

select
    n.run_id,
    n.env,
    n.member,
    n.address,
    n.role,
    n.shard,
    n.primary_address,
    n.slots,
    n.slot_ranges,
    n.health,
    n.health_at_end,
    n.lost_at_family,
    n.is_down,
    n.lagging,
    n.lag_max_bytes,
    n.lag_max_s,
    n.not_syncing,
    n.master_link_status,
    n.lag_bytes,
    n.lag_s,
    n.migrating_slots,
    n.importing_slots,
    n.problem,
    n.db0_keys,
    n.used_memory_bytes,
    n.server_label,
    f.rtt_client_p50_us,
    f.rtt_client_p99_us,
    f.server_ping_usec_per_call,
    f.slowlog_entries_new,
    s.steps_not_ok,
    v.verdict as member_verdict,
    v.regressions as member_regressions,
from nodes as n
left join member_figures as f on f.run_id = n.run_id and f.env = n.member
left join member_steps as s on s.run_id = n.run_id and s.env = n.member
left join {{ ref('verdicts') }} as v on v.run_id = n.run_id and v.env = n.member
order by n.run_id, n.env, coalesce(n.shard, n.address), n.role, n.address
