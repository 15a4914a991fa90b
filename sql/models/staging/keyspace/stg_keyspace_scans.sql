/* One row per key space scan (a run and environment) of the batch: its budget and how it
   ended. */
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
from {{ source('lake', 'raw_keyspace_scans') }}
