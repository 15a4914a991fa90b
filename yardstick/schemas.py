"""Arrow schemas of the lake tables: the one place a raw column is declared.

Files carry no `env` column: it comes from the folder (`env=<env>`); a run's day comes from its
run id. The lake adds `run_id` and `schema_version`."""

from __future__ import annotations

import pyarrow as pa

# Bump when a table gains a column; older files still load (missing columns are null).
SCHEMA_VERSION = 1

_TS = pa.timestamp("us", tz="UTC")

TABLES: dict[str, pa.Schema] = {
    # One row per environment per run: what ran, how it ended.
    "runs": pa.schema(
        [
            ("profile", pa.string()),
            ("started_at", _TS),
            ("finished_at", _TS),
            ("duration_s", pa.float64()),
            ("status", pa.string()),  # ok | partial | failed
            ("error", pa.string()),
            ("mode", pa.string()),
            ("transport", pa.string()),
            ("url", pa.string()),  # credentials removed
            ("host_group", pa.string()),
            ("same_server_as", pa.string()),
            ("prober_on_host", pa.bool_()),
            ("tool_version", pa.string()),
            # Who measured: the environment's site, the machine and process of the prober,
            # and the Prefect flow run (a site's own run when the nightly fanned out).
            ("site", pa.string()),
            ("prober_hostname", pa.string()),
            ("prober_pid", pa.int64()),
            ("worker_pid", pa.int64()),  # the Prefect worker that started the prober, if any
            ("flow_run_id", pa.string()),
        ]
    ),
    # One row per measurement family per environment per run.
    "steps": pa.schema(
        [
            ("family", pa.string()),
            ("status", pa.string()),  # ok | failed | skipped
            ("reason", pa.string()),
            ("started_at", _TS),
            ("finished_at", _TS),
            ("duration_s", pa.float64()),
            ("window_s", pa.float64()),  # time spent inside measurement windows
            # The profile settings the family was asked to run with, and their digest: a
            # figure is compared only with points of the same profile and digest.
            ("params", pa.string()),
            ("params_digest", pa.string()),
        ]
    ),
    # Environment facts, long format so every Redis version's INFO fits.
    "fingerprint": pa.schema(
        [("section", pa.string()), ("key", pa.string()), ("value", pa.string())]
    ),
    # PING probe windows: exact per-window aggregates of every sample.
    "ping_windows": pa.schema(
        [
            ("window_idx", pa.int32()),
            ("started_at", _TS),
            ("window_s", pa.float64()),
            ("interval_ms", pa.float64()),
            ("samples", pa.int64()),
            ("rtt_min_us", pa.float64()),
            ("rtt_max_us", pa.float64()),
            ("rtt_mean_us", pa.float64()),
            ("host_busy_share", pa.float64()),  # prober machine's CPU busy share
        ]
    ),
    # Log-bucketed histogram of every PING RTT in a window; percentiles come from here.
    "ping_histogram": pa.schema(
        [
            ("window_idx", pa.int32()),
            ("bucket", pa.int32()),
            ("low_us", pa.float64()),
            ("high_us", pa.float64()),
            ("count", pa.int64()),
        ]
    ),
    # INFO latencystats after each window (7.0+): cumulative since the server's stats began.
    "latencystats": pa.schema(
        [
            ("window_idx", pa.int32()),
            ("taken_at", _TS),
            ("command", pa.string()),
            ("percentile", pa.float64()),
            ("latency_us", pa.float64()),
        ]
    ),
    # redis-benchmark --csv: one row per test per cell invocation (failed ones included).
    "benchmark": pa.schema(
        [
            ("repetition", pa.int32()),
            ("clients", pa.int32()),
            ("pipeline", pa.int32()),
            ("payload_bytes", pa.int32()),
            ("requests", pa.int64()),
            ("test", pa.string()),
            ("status", pa.string()),  # ok | failed
            ("error", pa.string()),
            ("rps", pa.float64()),
            ("avg_ms", pa.float64()),
            ("min_ms", pa.float64()),
            ("p50_ms", pa.float64()),
            ("p95_ms", pa.float64()),
            ("p99_ms", pa.float64()),
            ("max_ms", pa.float64()),
            ("started_at", _TS),
            ("elapsed_s", pa.float64()),
            ("host_busy_share", pa.float64()),
            ("tool_version", pa.string()),
        ]
    ),
    # memtier_benchmark --json-out-file: one row per op type (sets, gets, totals).
    "memtier": pa.schema(
        [
            ("op_type", pa.string()),
            ("count", pa.float64()),
            ("ops_sec", pa.float64()),
            ("hits_sec", pa.float64()),
            ("misses_sec", pa.float64()),
            ("avg_ms", pa.float64()),
            ("min_ms", pa.float64()),
            ("max_ms", pa.float64()),
            ("p50_ms", pa.float64()),
            ("p99_ms", pa.float64()),
            ("p999_ms", pa.float64()),
            ("kb_sec", pa.float64()),
            ("duration_ms", pa.float64()),
            ("ratio", pa.string()),
            ("threads", pa.int32()),
            ("clients_per_thread", pa.int32()),
            ("data_size_bytes", pa.int32()),
            ("started_at", _TS),
            ("elapsed_s", pa.float64()),
            ("host_busy_share", pa.float64()),
            ("tool_version", pa.string()),
        ]
    ),
    # Same server, two paths: one row per round and side (landed under the forwarded env).
    "transport": pa.schema(
        [
            ("round", pa.int32()),
            ("side", pa.string()),  # direct | forwarded
            ("env_measured", pa.string()),
            ("transport", pa.string()),
            ("started_at", _TS),
            ("samples", pa.int64()),
            ("rtt_mean_us", pa.float64()),
            ("rtt_min_us", pa.float64()),
            ("rps", pa.float64()),  # single-client SET; scratch pairs only
            ("error", pa.string()),
        ]
    ),
    # redis-cli --intrinsic-latency: one row per run on the server host.
    "intrinsic": pa.schema(
        [
            ("started_at", _TS),
            ("duration_s", pa.float64()),
            ("max_us", pa.float64()),
            ("max_updates", pa.int64()),
            ("total_runs", pa.int64()),
            ("avg_us_per_run", pa.float64()),
            ("avg_ns_per_run", pa.float64()),
            ("worst_over_avg_printed", pa.float64()),
            ("host_busy_share", pa.float64()),
            ("load_1m_before", pa.float64()),
            ("tool_path", pa.string()),
            ("tool_version", pa.string()),
        ]
    ),
    # INFO commandstats counters taken just before and just after each window.
    "commandstats": pa.schema(
        [
            ("window_idx", pa.int32()),
            ("phase", pa.string()),  # before | after
            ("taken_at", _TS),
            ("command", pa.string()),
            ("calls", pa.int64()),
            ("usec", pa.int64()),
            ("rejected_calls", pa.int64()),
            ("failed_calls", pa.int64()),
        ]
    ),
}

# Slow commands and stalls: SLOWLOG and latency-monitor collection, commandstats over time
# (every environment), and the scratch experiments (O(N) commands, contention, agreement).
TABLES.update(
    {
        # One row per SLOWLOG collection: what decides which entries get in and how long
        # they stay; ids, dedup and losses are derived in sql/030.
        "slowlog_collections": pa.schema(
            [
                ("server_run_id", pa.string()),  # ids restart with the server process
                ("redis_version", pa.string()),
                ("uptime_s", pa.int64()),
                ("collected_at", _TS),
                ("slowlog_len", pa.int64()),
                ("slowlog_max_len", pa.int64()),  # null where CONFIG is unavailable
                ("log_slower_than_us", pa.int64()),
                ("count_requested", pa.int64()),  # -1 on 7.0+, a large count before
                ("entries_returned", pa.int64()),
                ("args_redacted", pa.bool_()),
                ("tool_client_prefix", pa.string()),  # client names that mark the tool
                ("read_s", pa.float64()),
                # SLOWLOG RESET calls in INFO commandstats (null before 7.0 or unreadable).
                ("slowlog_reset_calls", pa.int64()),
                # An empty log only: the id of its next entry (0), null when a RESET or a
                # max-len of 0 may have emptied it; the basis says why (tasks/slowlog.py).
                ("empty_log_next_id", pa.int64()),
                ("empty_log_basis", pa.string()),
            ]
        ),
        # Every entry each collection read (the same entry recurs; SQL deduplicates).
        "slowlog_entries": pa.schema(
            [
                ("server_run_id", pa.string()),
                ("entry_id", pa.int64()),
                ("logged_at", _TS),
                ("duration_us", pa.int64()),
                ("command", pa.string()),  # `sort`, `config|get`
                ("args", pa.list_(pa.string())),  # values replaced by `<N bytes>` if redacted
                ("args_redacted", pa.bool_()),
                ("arg_count", pa.int32()),
                ("arg_count_original", pa.int32()),  # 7th field, Redis 8.10+
                ("complexity", pa.string()),  # Redis Enterprise's extra field
                ("client_addr", pa.string()),
                ("client_name", pa.string()),
                ("entry_fields", pa.int8()),  # 4, 6 or 7
            ]
        ),
        # SLOWLOG ids and time each scratch experiment occupied (not application entries);
        # one table per family, as a run lands one file per table.
        **{
            f"{family}_span": pa.schema(
                [
                    ("family", pa.string()),
                    ("server_run_id", pa.string()),
                    ("started_at", _TS),
                    ("finished_at", _TS),
                    ("first_entry_id", pa.int64()),
                    ("last_entry_id", pa.int64()),
                ]
            )
            for family in ("contention", "slow_commands", "agreement")
        },
        "latency_collections": pa.schema(
            [
                ("server_run_id", pa.string()),
                ("collected_at", _TS),
                ("threshold_ms", pa.int64()),  # 0: the monitor is off
                ("events", pa.int32()),
                ("doctor_text", pa.string()),  # LATENCY DOCTOR, kept as text
                ("error", pa.string()),
            ]
        ),
        "latency_latest": pa.schema(
            [
                ("server_run_id", pa.string()),
                ("event", pa.string()),
                ("latest_at", _TS),
                ("latest_ms", pa.int64()),
                ("max_ms", pa.int64()),  # all-time worst since the server started or reset
            ]
        ),
        # One sample per event per second (the worst of that second), up to 160 per event.
        "latency_history": pa.schema(
            [
                ("server_run_id", pa.string()),
                ("event", pa.string()),
                ("sampled_at", _TS),
                ("latency_ms", pa.int64()),
            ]
        ),
        # INFO commandstats once per run; consecutive snapshots of one server run are
        # differenced in SQL (never reset).
        "commandstats_snapshots": pa.schema(
            [
                ("server_run_id", pa.string()),
                ("uptime_s", pa.int64()),
                ("taken_at", _TS),
                ("command", pa.string()),
                ("calls", pa.int64()),
                ("usec", pa.int64()),
                ("rejected_calls", pa.int64()),
                ("failed_calls", pa.int64()),
            ]
        ),
        # O(N) commands: one row per command per repetition, duration from its SLOWLOG entry.
        "slow_commands": pa.schema(
            [
                ("command", pa.string()),  # lrange_all | hgetall | keys_pattern | sort_alpha_limit
                ("args", pa.string()),
                ("rep_idx", pa.int32()),
                ("n_elements", pa.int64()),  # N: list length, hash fields, keys in the database
                ("returned", pa.int64()),  # M: elements in the reply
                ("entry_id", pa.int64()),  # null when no matching entry was found
                ("duration_us", pa.int64()),
                ("client_us", pa.float64()),  # timed from outside, reply transfer included
                ("logged_at", _TS),
            ]
        ),
        # GET counters before and after `calls_sent` GETs: the per-GET baseline of the run.
        "slow_commands_baseline": pa.schema(
            [
                ("phase", pa.string()),  # before | after
                ("command", pa.string()),
                ("taken_at", _TS),
                ("calls_sent", pa.int64()),
                ("calls", pa.int64()),
                ("usec", pa.int64()),
            ]
        ),
        "contention_setup": pa.schema(
            [
                ("server_run_id", pa.string()),
                ("list_len", pa.int64()),
                ("slowlog_threshold_us", pa.int64()),
                ("slowlog_max_len_used", pa.int64()),
                ("victim_client_name", pa.string()),
                ("culprit_client_name", pa.string()),
                ("culprit_commands", pa.int64()),
                ("culprit_busy_us", pa.float64()),
                ("loop_s", pa.float64()),
                ("baseline_entry_id", pa.int64()),
            ]
        ),
        # Victim PING windows: exact aggregates of every sample in the window.
        "contention_windows": pa.schema(
            [
                ("phase", pa.string()),  # before | during | after
                ("window_idx", pa.int32()),
                ("started_at", _TS),
                ("window_s", pa.float64()),
                ("samples", pa.int64()),
                ("rtt_min_us", pa.float64()),
                ("rtt_max_us", pa.float64()),
                ("rtt_mean_us", pa.float64()),
                ("over_threshold", pa.int64()),  # PINGs that waited longer than the threshold
            ]
        ),
        # PING and SORT counters just before and just after the culprit's loop.
        "contention_counters": pa.schema(
            [
                ("phase", pa.string()),
                ("taken_at", _TS),
                ("command", pa.string()),
                ("calls", pa.int64()),
                ("usec", pa.int64()),
            ]
        ),
        # Every SLOWLOG entry logged from the start of the victim's probe to the end.
        "contention_slowlog": pa.schema(
            [
                ("entry_id", pa.int64()),
                ("command", pa.string()),
                ("client_name", pa.string()),
                ("duration_us", pa.int64()),
            ]
        ),
        # One SORT per repetition, seen by three instruments.
        "agreement": pa.schema(
            [
                ("server_run_id", pa.string()),
                ("rep_idx", pa.int32()),
                ("list_len", pa.int64()),
                ("client_us", pa.float64()),
                ("entry_id", pa.int64()),
                ("slowlog_us", pa.int64()),
                ("logged_at", _TS),
                ("latency_ms", pa.int64()),  # the monitor's sample of that second
                ("latency_sampled_at", _TS),
                ("latency_threshold_ms", pa.int64()),
                ("latency_threshold_before_ms", pa.int64()),
                ("measured_at", _TS),
            ]
        ),
    }
)

# Memory: bytes per key by used_memory difference (scratch), and the key space by prefix
# (every environment). Figures are derived in sql/04*.
TABLES.update(
    {
        # One row per shape and repetition: what was loaded, so payload and the classic
        # formula can be computed beside the difference.
        "memory_loads": pa.schema(
            [
                ("shape", pa.string()),
                ("repetition", pa.int32()),
                ("type", pa.string()),  # string | hash | list
                ("db", pa.int32()),
                ("keys", pa.int64()),
                ("elements_per_key", pa.int64()),
                ("key_bytes", pa.int64()),  # sum of key name lengths
                ("value_bytes", pa.int64()),  # sum of values (and hash field names)
                ("formula_overhead_bytes", pa.int64()),  # the 50 of keys x (key + value + 50)
                ("load_s", pa.float64()),
                ("started_at", _TS),
            ]
        ),
        # INFO memory and DBSIZE before the load, after it, and after the removal.
        "memory_readings": pa.schema(
            [
                ("shape", pa.string()),
                ("repetition", pa.int32()),
                ("phase", pa.string()),  # before | after | removed
                ("taken_at", _TS),
                ("used_memory_bytes", pa.int64()),
                ("used_memory_rss_bytes", pa.int64()),
                ("mem_fragmentation_ratio", pa.float64()),
                ("mem_clients_normal_bytes", pa.int64()),  # client buffers, for noise checks
                ("dbsize", pa.int64()),
            ]
        ),
        # MEMORY USAGE of sampled loaded keys: default samples, and SAMPLES 0 (every element).
        "memory_usage_samples": pa.schema(
            [
                ("shape", pa.string()),
                ("repetition", pa.int32()),
                ("key", pa.string()),
                ("encoding", pa.string()),
                ("elements", pa.int64()),
                ("payload_bytes", pa.int64()),  # key + value bytes of this key
                ("memory_usage_bytes", pa.int64()),
                ("memory_usage_all_bytes", pa.int64()),  # SAMPLES 0
            ]
        ),
        # One row per key-space scan: its budget, how it ended, the server around it.
        "keyspace_scans": pa.schema(
            [
                ("started_at", _TS),
                ("wall_s", pa.float64()),
                ("paused_s", pa.float64()),  # slept to stay within the busy share
                ("stop_reason", pa.string()),  # complete | key_cap | time_cap
                ("max_keys", pa.int64()),
                ("busy_share_cap", pa.float64()),  # the budget: a share of the server's CPU
                ("max_wall_s", pa.float64()),
                ("scan_count", pa.int64()),
                ("memory_samples", pa.int64()),  # null: the server's default (5)
                ("separators", pa.string()),
                ("depth", pa.int32()),
                ("top_keys", pa.int32()),
                ("projection_factor", pa.float64()),
                ("db", pa.int32()),
                ("dbsize_before", pa.int64()),
                ("dbsize_after", pa.int64()),
                ("keys_other_dbs", pa.int64()),  # used_memory covers every database
                ("used_memory_before_bytes", pa.int64()),
                ("used_memory_after_bytes", pa.int64()),
                ("server_cpu_before_s", pa.float64()),  # INFO cpu, all clients
                ("server_cpu_after_s", pa.float64()),
                ("rounds", pa.int64()),
                ("scan_calls", pa.int64()),
                ("duplicates", pa.int64()),
                ("vanished", pa.int64()),
                # Length commands answered WRONGTYPE: before the type-first scan, wrong guesses;
                # since, a key that changed type between TYPE and its length command.
                ("guesses_wrong", pa.int64()),
                ("errors", pa.int64()),
                ("first_error", pa.string()),
                # Added with the footprint-free scan; null in older files.
                ("allow_touch", pa.bool_()),  # length commands allowed without NO-TOUCH
                ("server_version", pa.string()),  # redis_version, as INFO says
                # no-touch (CLIENT NO-TOUCH ON) | skipped (no length command: elements
                # null) | touched (length commands reset keys_touched clocks)
                ("touch_mode", pa.string()),
                ("touch_note", pa.string()),  # why CLIENT NO-TOUCH was not used
                ("keys_touched", pa.int64()),  # keys whose LRU/LFU clock the scan moved
                ("keyspace_lookups", pa.int64()),  # commands counted in keyspace_hits/misses
                ("commands", pa.int64()),  # commands the scan's rounds sent
                # INFO used_cpu_sys + used_cpu_user (all clients) as the scan started/ended,
                # and the rate before it (taken as other clients', subtracted).
                ("scan_cpu_start_s", pa.float64()),
                ("scan_cpu_end_s", pa.float64()),
                ("baseline_cpu_share", pa.float64()),
                ("baseline_window_s", pa.float64()),
                ("process_cpu_s", pa.float64()),  # /proc, prober on the server's host only
                # Highest CPU share the scan took over one pacing window (>= 0.1 s), that
                # window's length, and the longest run of windows over the budget.
                ("cpu_peak_share", pa.float64()),
                ("cpu_peak_window_s", pa.float64()),
                ("over_budget_longest_s", pa.float64()),
                # Added with typed SCAN pages; null in older files (every key's OBJECT ENCODING
                # was read then). scan | scan+type | encoding: where each key's type came from.
                ("type_source", pa.string()),
                ("typed_scan_calls", pa.int64()),  # SCAN ... TYPE t commands sent
                ("type_fallback_pages", pa.int64()),  # typed SCANs disagreed: TYPE asked
                # After the first 4096 keys, one key's OBJECT ENCODING in this many (1: every
                # key's), plus the top keys'; and how many keys' encodings were read.
                ("encoding_every", pa.int64()),
                ("encodings_read", pa.int64()),
            ]
        ),
        # Every key the scan sampled (what --bigkeys and --memkeys print, per key).
        "keyspace_keys": pa.schema(
            [
                ("key", pa.string()),  # non-UTF-8 bytes as backslash escapes
                ("prefix", pa.string()),  # `user:*`, or `(no prefix)`
                ("type", pa.string()),
                ("encoding", pa.string()),
                ("elements", pa.int64()),  # items; bytes for strings (STRLEN)
                ("memory_usage_bytes", pa.int64()),
            ]
        ),
        # INFO commandstats of the scan's own commands, before and after it.
        "keyspace_commandstats": pa.schema(
            [
                ("phase", pa.string()),  # before | after
                ("command", pa.string()),
                ("calls", pa.int64()),
                ("usec", pa.int64()),
                ("failed_calls", pa.int64()),
            ]
        ),
    }
)

# Figures kept when their per-run detail is dropped (yardstick/retention.py): the measures
# rows the warehouse derived, so a rebuild from the lake alone still has them.
TABLES["retained_measures"] = pa.schema(
    [
        ("figure", pa.string()),
        ("subject", pa.string()),
        ("window_idx", pa.int32()),
        ("value", pa.float64()),
        ("samples", pa.int64()),
    ]
)

# Columns the lake adds to every file.
COMMON_FIELDS = [pa.field("run_id", pa.string()), pa.field("schema_version", pa.int16())]


def file_schema(table: str) -> pa.Schema:
    """Full schema of a lake file for `table` (common columns first)."""
    schema = TABLES[table]
    return pa.schema([*COMMON_FIELDS, *schema])


def to_table(table: str, rows: list[dict]) -> pa.Table:
    """Build an Arrow table for `table` from row dicts (unknown keys are an error)."""
    schema = TABLES[table]
    extra = {key for row in rows for key in row} - set(schema.names)
    if extra:
        raise ValueError(f"table {table!r}: unknown columns {sorted(extra)}")
    return pa.Table.from_pylist(rows, schema=schema)
