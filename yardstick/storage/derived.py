"""Closed days derived once: what the warehouse's marts hold for the runs of closed days is
kept in the lake (`lake/_derived/<mart>/`, Delta tables partitioned by period), with a chain
of checkpoints saying which runs each one covers; a rebuild imports the longest valid chain
instead of recomputing those days from every collection and every key.

A checkpoint is taken when the warehouse stands at the end of a day whose runs are all loaded
(the next runs it loads are of a later day). It holds the rows of every per-run mart for the
runs loaded since its parent, and, of each state mart (one row set per key, replaced when a
batch touches the key), the rows of the keys touched since its parent. It is valid while the
models' digest, the lake's schema version and the lake's complete runs of its days are what
they were (a late run of a closed day invalidates it and every later checkpoint). Rows of a
checkpoint whose manifest row never landed (a process killed while exporting) are ignored."""

from __future__ import annotations

import hashlib
import logging
import time
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa

from yardstick.storage import delta, lakefs
from yardstick.storage.lakefs import Lake

log = logging.getLogger(__name__)

ROOT = "_derived"
MANIFEST = "_checkpoints"
# State marts: (the key an update replaces rows by, the column saying which run last set them).
STATE_MARTS: dict[str, tuple[tuple[str, ...], str]] = {
    "figure_series_tail": (("env", "figure", "subject"), "run_id"),
    "run_environment_tail": (("env",), "run_id"),
    "latest_full_runs": (("env",), "run_id"),
    "commandstats_last_snapshot": (("env", "server_run_id"), "run_id"),
    "server_cpu_last": (("env",), "run_id"),
    "environment_members": (("member",), "run_id"),
    "slowlog_server_runs": (("env", "server_run_id"), "last_run_id"),
}
# Per-run marts say their run in run_id, except these.
RUN_COLUMN = {"latency_samples": "first_run_id"}
# Not the models' rows: the seed, and the detail views read in place.
NOT_DERIVED = {"figure_catalog", "keyspace_keys", "ping_histogram"}
NO_DAY = "00000000"  # the day before every run: the root of the chain


@dataclass(frozen=True)
class Checkpoint:
    """One manifest row: a checkpoint's runs and what they were derived with."""

    checkpoint: str
    parent: str
    after_day: str  # YYYYMMDD: its runs are of days after this one...
    through_day: str  # ...up to and including this one
    runs: int
    runs_hash: str
    models_digest: str
    schema_version: int
    created_at: str


def _table(name: str) -> str:
    """The lake-relative name of a derived table."""
    return f"{ROOT}/{name}"


def runs_hash(runs: list[tuple[str, str]]) -> str:
    """A digest of a set of (env, run) pairs, whatever their order."""
    digest = hashlib.sha256()
    for env, run in sorted(runs):
        digest.update(f"{env}\t{run}\n".encode())
    return digest.hexdigest()[:32]


def mart_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The marts a checkpoint derives: every table of the marts schema but the seed."""
    rows = con.execute(
        "select table_name from duckdb_tables() where schema_name = 'marts' "
        "and database_name = current_database() order by 1"
    ).fetchall()
    return [name for (name,) in rows if name not in NOT_DERIVED]


def _run_column(mart: str) -> str:
    return STATE_MARTS[mart][1] if mart in STATE_MARTS else RUN_COLUMN.get(mart, "run_id")


def _period(column: str) -> str:
    return f"left({column}, 4) || '-' || substr({column}, 5, 2)"


def _export_select(mart: str, after_day: str, through_day: str, checkpoint: str) -> str:
    """The rows of `mart` a checkpoint over (after_day, through_day] keeps."""
    run = _run_column(mart)
    tag = f"{_period(run)} as period, '{checkpoint}' as checkpoint"
    if mart not in STATE_MARTS:
        # Run ids begin with their day: '~' sorts after every character a run id has, so
        # the bounds are plain comparisons (the rows are appended in time order: DuckDB
        # skips older row groups by their zone maps).
        return (
            f"select *, {tag} from marts.{mart} "
            f"where {run} > '{after_day}~' and {run} < '{through_day}~'"
        )
    keys = ", ".join(STATE_MARTS[mart][0])
    return (
        f"select *, '{through_day[:4]}-{through_day[4:6]}' as period, '{checkpoint}' as checkpoint "
        f"from marts.{mart} semi join (select {keys} from marts.{mart} group by all "
        f"having max({run}) > '{after_day}~') using ({keys})"
    )


def _write(lake: Lake, name: str, data: pa.Table) -> None:
    """Append rows to a derived table (one Delta commit), replacing a table whose schema the
    rows no longer fit (its rows belong to models that changed: no valid checkpoint reads them)."""
    from deltalake import write_deltalake

    uri = lake.path(_table(name))
    if not lake.remote:
        Path(uri).mkdir(parents=True, exist_ok=True)
    partition = ["period"] if "period" in data.column_names else None
    with lakefs.storage_errors("commit", uri):
        for mode in ("append", "overwrite"):
            try:
                write_deltalake(
                    uri,
                    data,
                    mode=mode,
                    partition_by=partition,
                    schema_mode="merge" if mode == "append" else "overwrite",
                    configuration=delta.TABLE_CONFIG,
                    storage_options=lake.storage_options,
                )
                return
            except Exception as exc:
                text = str(exc).lower()
                if mode == "overwrite" or ("schema" not in text and "cast" not in text):
                    raise
                log.warning("derived table %s: schema changed, its rows are replaced", name)


def export(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    parent: str,
    after_day: str,
    through_day: str,
    runs: list[tuple[str, str]],
    models_digest: str,
    schema_version: int,
) -> Checkpoint:
    """Derive a checkpoint from the warehouse as it stands (at the end of `through_day`):
    every mart's rows since checkpoint `parent` (through `after_day`; "" and NO_DAY for the
    first), then its manifest row (last: a kill before it leaves rows no checkpoint names)."""
    start = time.perf_counter()
    stamp = datetime.now(UTC)
    checkpoint = Checkpoint(
        checkpoint=f"{through_day}-{stamp.strftime('%Y%m%dT%H%M%S%f')}",
        parent=parent,
        after_day=after_day,
        through_day=through_day,
        runs=len(runs),
        runs_hash=runs_hash(runs),
        models_digest=models_digest,
        schema_version=schema_version,
        created_at=stamp.isoformat(),
    )
    rows = 0
    for mart in mart_tables(con):
        data = con.sql(
            _export_select(mart, after_day, through_day, checkpoint.checkpoint)
        ).to_arrow_table()
        if data.num_rows:
            _write(lake, mart, data)
            rows += data.num_rows
    manifest = pa.Table.from_pylist([checkpoint.__dict__])
    _write(lake, MANIFEST, manifest)
    log.info(
        "derived days %s..%s kept in the lake: %d runs, %d rows (%.1f s)",
        after_day,
        through_day,
        len(runs),
        rows,
        time.perf_counter() - start,
    )
    return checkpoint


def checkpoints(lake: Lake) -> list[Checkpoint]:
    """Every manifest row in the lake."""
    dt = lake.table(_table(MANIFEST))
    if dt is None:
        return []
    names = Checkpoint.__dataclass_fields__
    return [
        Checkpoint(**{k: v for k, v in row.items() if k in names})
        for row in dt.to_pyarrow_table().to_pylist()
    ]


def chain(
    lake: Lake,
    complete: set[tuple[str, str]],
    models_digest: str,
    schema_version: int,
) -> list[Checkpoint]:
    """The longest chain of valid checkpoints from the root (oldest first): derived with these
    models and this lake schema, each holding exactly the lake's complete runs of its days."""
    by_day: dict[str, list[tuple[str, str]]] = {}
    for env, run in complete:
        by_day.setdefault(run[:8], []).append((env, run))
    days = sorted(by_day)
    valid: dict[str, list[Checkpoint]] = {}
    for cp in checkpoints(lake):
        if cp.models_digest != models_digest or cp.schema_version != schema_version:
            continue
        # The lake's runs of its days (a year of 5-minute collections: grouped by day once).
        chosen = days[bisect_right(days, cp.after_day) : bisect_right(days, cp.through_day)]
        if runs_hash([r for day in chosen for r in by_day[day]]) != cp.runs_hash:
            continue
        valid.setdefault(cp.parent, []).append(cp)
    found: list[Checkpoint] = []
    parent = ""
    while valid.get(parent):
        # Two checkpoints of one parent (an export redone after a kill): the same runs, the
        # furthest reaching, then the newest.
        best = max(valid[parent], key=lambda cp: (cp.through_day, cp.created_at))
        found.append(best)
        parent = best.checkpoint
    return found


def _files(lake: Lake, name: str) -> list[str]:
    """The data files of a derived table's current version."""
    dt = lake.table(_table(name))
    return dt.file_uris() if dt is not None else []


def load(con: duckdb.DuckDBPyConnection, lake: Lake, found: list[Checkpoint]) -> int:
    """Insert the chain's rows into the warehouse's (empty) marts; the rows inserted."""
    if not found:
        return 0
    if lake.remote:
        lakefs.register(con)
    position = pa.table(
        {
            "checkpoint": [cp.checkpoint for cp in found],
            "chain_position": list(range(len(found))),
        }
    )
    con.register("chain_positions", position)
    rows = 0
    try:
        for mart in mart_tables(con):
            # Oldest period first (the partition folders sort by month), each period's rows
            # as they were appended: the marts stay in time order (zone maps) with no sort.
            files = sorted(_files(lake, mart))
            if not files:
                continue
            listing = "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"
            scan = f"read_parquet({listing}, union_by_name = true, hive_partitioning = false) as t"
            if mart in STATE_MARTS:
                # A key's rows are those of the latest checkpoint that touched it.
                keys = ", ".join(STATE_MARTS[mart][0])
                latest = f"max(c.chain_position) over (partition by {keys})"
                source = (
                    f"select t.* exclude (checkpoint) from {scan} "
                    f"join chain_positions as c using (checkpoint) "
                    f"qualify c.chain_position = {latest}"
                )
            else:
                source = (
                    f"select t.* exclude (checkpoint) from {scan} "
                    f"where t.checkpoint in ({_quoted(c.checkpoint for c in found)})"
                )
            count = con.execute(f"insert into marts.{mart} by name {source}").fetchone()
            rows += count[0] if count else 0
    finally:
        con.unregister("chain_positions")
    return rows


def tables_present(lake: Lake) -> list[str]:
    """The derived tables in the lake (the manifest last)."""
    # A listing, not exists(): on S3 a folder is a prefix, no object a HEAD would find.
    root = lake.path(ROOT)
    names = [
        n
        for n in lakefs.list_names(root)
        if "_delta_log" in lakefs.list_names(lakefs.join(root, n))
    ]
    return sorted(names, key=lambda n: (n == MANIFEST, n))


def stale(found: list[Checkpoint], now: datetime | None = None) -> set[str]:
    """Checkpoints no rebuild will read again: derived with other models than the newest
    checkpoint's, or replaced by a newer export of the same days. (Rows whose manifest never
    landed are named by no checkpoint: `compact` drops those once a day old.)"""
    if not found:
        return set()
    newest = max(found, key=lambda cp: cp.created_at)
    current = [cp for cp in found if cp.models_digest == newest.models_digest]
    gone = {cp.checkpoint for cp in found if cp.models_digest != newest.models_digest}
    best: dict[tuple[str, str], Checkpoint] = {}
    for cp in current:
        key = (cp.parent, cp.through_day)
        if key not in best or cp.created_at > best[key].created_at:
            best[key] = cp
    return gone | {cp.checkpoint for cp in current if best[(cp.parent, cp.through_day)] != cp}


def compact(lake: Lake, vacuum_hours: int | None = None) -> tuple[int, int, int]:
    """The nightly pass over the derived tables: drop the rows of stale checkpoints, merge
    each period's files into one, vacuum and checkpoint the log (the lake's file count stays
    bounded: one file per mart and month). Returns (files in, files out, files deleted)."""
    found = checkpoints(lake)
    gone = stale(found)
    named = {cp.checkpoint for cp in found}
    day_old = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y%m%dT%H%M%S")
    files_in = files_out = deleted = 0
    for name in tables_present(lake):
        dt = lake.table(_table(name))
        if dt is None:
            continue
        root = lake.path(_table(name))
        with lakefs.storage_errors("optimize", root):
            if name == MANIFEST:
                if gone:
                    dt.delete(_in("checkpoint", gone))
            else:
                ids = dt.to_pyarrow_table(columns=["checkpoint"]).column(0).unique().to_pylist()
                # An export's id carries its time: an unnamed one a day old was killed.
                orphans = {c for c in ids if c not in named and c.split("-")[-1] < day_old}
                if gone & set(ids) or orphans:
                    dt.delete(_in("checkpoint", (gone & set(ids)) | orphans))
            metrics = dt.optimize.compact()
            files_in += metrics.get("numFilesRemoved", 0)
            files_out += metrics.get("numFilesAdded", 0)
            deleted += len(
                dt.vacuum(
                    retention_hours=vacuum_hours,
                    dry_run=False,
                    enforce_retention_duration=vacuum_hours is None,
                    full=True,
                )
            )
            dt.create_checkpoint()
            dt.cleanup_metadata()
    return files_in, files_out, deleted


def _quoted(values) -> str:
    """SQL string literals, comma-separated."""
    return ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(values))


def _in(column: str, values: set[str]) -> str:
    """A Delta predicate: the column is one of the values."""
    return f"{column} in ({_quoted(values)})"
