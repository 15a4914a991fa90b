/* One row per key space scan (a run and environment) of the batch: its budget, how it ended,
   what it cost the server and what it did to the keys' clocks. Columns after first_error are
   null for scans before the footprint-free scan. */
select
    run_id,
    env,
    started_at,
    wall_s,
    paused_s,                   /* slept to stay within the busy share */
    stop_reason,                /* complete | key_cap | time_cap */
    max_keys,
    busy_share_cap,             /* the budget: a share of the server's time (CPU since the
                                   footprint-free scan, commandstats before) */
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
    guesses_wrong,              /* length commands answered WRONGTYPE */
    errors,
    first_error,
    allow_touch,                /* length commands allowed without CLIENT NO-TOUCH */
    server_version,
    touch_mode,                 /* no-touch | skipped (elements null) | touched */
    touch_note,                 /* why CLIENT NO-TOUCH was not used */
    keys_touched,               /* keys whose LRU/LFU clock the scan moved */
    keyspace_lookups,           /* commands counted in INFO keyspace_hits/misses */
    commands,
    scan_cpu_start_s,           /* INFO used_cpu_sys + used_cpu_user, all clients */
    scan_cpu_end_s,
    baseline_cpu_share,         /* the server's CPU rate just before the scan */
    baseline_window_s,
    process_cpu_s,              /* /proc, prober on the server's host only */
    cpu_peak_share,             /* highest share over one pacing window (>= 0.1 s) */
    cpu_peak_window_s,
    over_budget_longest_s,      /* longest run of pacing windows over the budget */
    /* Null before types came from typed SCAN pages (every key's OBJECT ENCODING read then). */
    type_source,                /* scan | scan+type | encoding: where each key's type came from */
    typed_scan_calls,           /* SCAN ... TYPE t commands */
    type_fallback_pages,        /* pages whose typed SCANs disagreed: TYPE asked instead */
    encoding_every,             /* after the first 4096 keys, one key's OBJECT ENCODING in this
                                   many (1: every key's), and the top keys' */
    encodings_read,             /* keys whose OBJECT ENCODING was read */
from {{ source('lake', 'raw_keyspace_scans') }}
