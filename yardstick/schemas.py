"""Arrow schemas of the lake tables: the one place a raw column is declared.

Files carry no `env` or `date` column: those come from the hive path
(`env=<env>/date=<day>`). The lake adds `run_id` and `schema_version`."""

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
