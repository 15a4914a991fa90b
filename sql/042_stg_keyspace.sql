/* Key space, staged: the scan (its budget and how it ended), every sampled key, and the
   commandstats of the scan's own commands before and after it. Then the scan's cost and
   coverage, and the factor that takes sampled sums to the whole database. */
create or replace view stg_keyspace_scans as
select
    run_id,
    env,
    started_at,
    wall_s,
    paused_s,                   /* slept to stay within the busy share */
    stop_reason,                /* complete | key_cap | time_cap */
    max_keys,
    busy_share_cap,
    max_wall_s,
    scan_count,
    memory_samples,             /* null: the server's default (5) */
    separators,
    depth,
    top_keys,
    projection_factor,
    db,
    dbsize_before,
    dbsize_after,
    keys_other_dbs,             /* used_memory covers every database */
    used_memory_before_bytes,
    used_memory_after_bytes,
    server_cpu_before_s,
    server_cpu_after_s,
    rounds,
    scan_calls,
    duplicates,
    vanished,
    guesses_wrong,
    errors,
    first_error,
from raw_keyspace_scans;

create or replace view stg_keyspace_keys as
select
    run_id,
    env,
    key,
    prefix,                     /* `user:*`, or `(no prefix)` */
    type,
    encoding,
    elements,                   /* items; bytes for strings (STRLEN) */
    memory_usage_bytes,
from raw_keyspace_keys;

create or replace view stg_keyspace_commandstats as
select run_id, env, phase, command, calls, usec, failed_calls,
from raw_keyspace_commandstats;

create or replace table keyspace_scan_costs as
with own as (
    /* The tool's own commands: their counters' difference is the scan's server time. */
    select
        a.run_id,
        a.env,
        sum(a.calls - coalesce(b.calls, 0)) as own_calls,
        sum(a.usec - coalesce(b.usec, 0)) as own_usec,
    from stg_keyspace_commandstats as a
    left join stg_keyspace_commandstats as b
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
    from stg_keyspace_keys
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
    from stg_keyspace_scans as s
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
    /* Sampled sums times this estimate the whole database (1 when complete). */
    case
        when stop_reason = 'complete' then 1.0
        else greatest(1.0, dbsize_before / nullif(keys_sampled, 0))
    end as scale,
from joined;
