/* One row per key space scan (run, environment): its cost and coverage, and the factor that
   takes sampled sums to the whole database. */
with own as (
    /* The tool's own commands: their counters' difference is the scan's server time. */
    select
        a.run_id,
        a.env,
        sum(a.calls - coalesce(b.calls, 0)) as own_calls,
        sum(a.usec - coalesce(b.usec, 0)) as own_usec,
    from {{ ref('stg_keyspace_commandstats') }} as a
    left join {{ ref('stg_keyspace_commandstats') }} as b
        on b.run_id = a.run_id and b.env = a.env and b.command = a.command
        and b.phase = 'before'
    where a.phase = 'after'
    group by a.run_id, a.env
),

sampled as (
    select
        run_id,
        env,
        count(*) as keys_sampled,
        count(memory_usage_bytes) as keys_with_usage,
        coalesce(sum(memory_usage_bytes), 0) as memory_usage_total_bytes,
    from {{ ref('stg_keyspace_keys') }}
    group by run_id, env
),

joined as (
    select
        s.*,
        coalesce(k.keys_sampled, 0) as keys_sampled,
        coalesce(k.keys_with_usage, 0) as keys_with_usage,
        coalesce(k.memory_usage_total_bytes, 0) as memory_usage_total_bytes,
        o.own_calls,
        o.own_usec,
        (s.used_memory_before_bytes + s.used_memory_after_bytes) / 2 as used_memory_bytes,
        /* The scan's CPU on the server: the INFO used_cpu difference over the scan less the
           rate read just before it (other clients'); null before the footprint-free scan. */
        case
            when s.scan_cpu_end_s is not null then greatest(
                0.0,
                s.scan_cpu_end_s - s.scan_cpu_start_s
                    - coalesce(s.baseline_cpu_share, 0) * s.wall_s
            )
        end as scan_cpu_s,
    from {{ ref('stg_keyspace_scans') }} as s
    left join sampled as k on k.run_id = s.run_id and k.env = s.env
    left join own as o on o.run_id = s.run_id and o.env = s.env
)

select
    *,
    /* A complete scan saw every key that stayed; a capped one saw this share of them. */
    case
        when stop_reason = 'complete' then 1.0
        else least(1.0, keys_sampled / nullif(dbsize_before, 0))
    end as coverage_share,
    own_usec / 1e6 / nullif(wall_s, 0) as busy_share,
    (server_cpu_after_s - server_cpu_before_s) / nullif(wall_s, 0) as server_cpu_share,
    keys_sampled / nullif(wall_s, 0) as keys_per_s,
    own_usec / nullif(keys_sampled, 0) as server_us_per_key,
    scan_cpu_s / nullif(wall_s, 0) as cpu_share,
    /* The server process's own CPU (all clients) over the scan, read from /proc. */
    process_cpu_s / nullif(wall_s, 0) as process_cpu_share,
    1e6 * scan_cpu_s / nullif(keys_sampled, 0) as server_cpu_us_per_key,
    commands / nullif(keys_sampled, 0) as commands_per_key,
    /* Sampled sums times this estimate the whole database (1 when complete). */
    case
        when stop_reason = 'complete' then 1.0
        else greatest(1.0, dbsize_before / nullif(keys_sampled, 0))
    end as scale,
from joined
