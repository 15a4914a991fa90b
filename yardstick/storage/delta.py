"""The lake: one Delta Lake table per lake table (deltalake, i.e. delta-rs), on a folder or S3.

    lake/<table>/_delta_log/                                   the table's commits
    lake/<table>/env=<env>/period=<YYYY-MM>/part-*.parquet     its data files

Every table is partitioned by environment and month (`env`, `period`), its columns are the
family's declared Arrow schema plus `run_id` and `schema_version`. Any Delta reader reads it
without the tool: `deltalake.DeltaTable("lake/runs").to_pyarrow_table()`.

Landing is one Delta append per table (a commit appears whole or not at all; concurrent
appends from several processes or sites both commit: delta-rs retries an append on the next
version, and on S3 the commit is a conditional put, lakefs.storage_options). A collection
lands its environments' rows as one commit per table (`batch`), so the log grows by one
commit per table and collection, not per environment.

The tool's own rule, stated here once: **a run counts once its `runs` row has landed**. A run
lands every other table first, then `steps`, then `runs` (flows/landing.py, `batch`); readers
(the warehouse, collection cursors) take only runs whose `runs` row is there."""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, date, datetime
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from yardstick.storage import lakefs
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import SCHEMA_VERSION, file_schema

# The table that makes a run count (see the module's docstring); landed last.
COMPLETES_A_RUN = "runs"
PARTITION_BY = ["env", "period"]
# Table properties every lake table is created with (compaction brings older tables to
# them). The log keeps 30 minutes of commits before the last checkpoint (the warehouse
# compares file lists, it never time-travels; a day of log was ~5,000 files at 50
# environments; compaction's sweep reads the last 10 minutes), a checkpoint every 50
# commits lets a reader skip the JSON before it, and files the nightly compaction or
# retention removed stay one hour for readers that listed them just before (then `vacuum`
# deletes them; compaction's sweep, 10 minutes after: compaction.READER_MARGIN_S).
TABLE_CONFIG = {
    "delta.logRetentionDuration": "interval 30 minutes",
    "delta.checkpointInterval": "50",
    "delta.deletedFileRetentionDuration": "interval 1 hours",
    "delta.enableExpiredLogCleanup": "true",
}
_RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-z]+$")
# The run's own record: never landed twice for one environment and run (a site and the hub
# may both try, flows/sites.py). A family's tables are landed once by the family that measured
# them, and several families may land rows of one shared table for a run (family_load).
LANDED_ONCE = (COMPLETES_A_RUN, "steps")
# Appends racing on one version retry this many times (each retry reads the winner's commit).
COMMIT_RETRIES = 20


class LakeConflict(Exception):
    """The run's record (runs, steps) for this environment already landed: never twice."""


def new_run_id(now: datetime | None = None) -> str:
    """A sortable, unique run id such as 20261129T224501Z-3f9a1c."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def is_run_id(text: str) -> bool:
    """Whether `text` has a run id's shape."""
    return bool(_RUN_ID.match(text))


def run_day(run_id: str) -> date:
    """The UTC day a run started, read from its id: every table of a run shares it."""
    return datetime.strptime(run_id[:8], "%Y%m%d").date()


def run_period(run_id: str) -> str:
    """The period (UTC month, YYYY-MM) a run's rows land in."""
    return f"{run_id[:4]}-{run_id[4:6]}"


# --- tables -------------------------------------------------------------------------------


def prepare(table: str, env: str, run_id: str, data: pa.Table) -> pa.Table:
    """One run's rows of `table` in the table's schema, with run_id, schema_version, env and
    period added; unknown or missing columns are refused, naming them."""
    schema = file_schema(table)
    # The lake adds these two; the task provides every other declared column, by name.
    declared = pa.schema([f for f in schema if f.name not in ("run_id", "schema_version")])
    unknown = sorted(set(data.column_names) - set(declared.names))
    missing = sorted(set(declared.names) - set(data.column_names))
    if unknown or missing:
        raise ValueError(f"table {table!r}: unknown columns {unknown}, missing columns {missing}")
    n = data.num_rows
    data = data.select(declared.names).cast(declared)
    data = data.add_column(0, "schema_version", pa.array([SCHEMA_VERSION] * n, pa.int16()))
    data = data.add_column(0, "run_id", pa.array([run_id] * n, pa.string()))
    data = data.append_column("env", pa.array([env] * n, pa.string()))
    return data.append_column("period", pa.array([run_period(run_id)] * n, pa.string()))


def append(lake: Lake, table: str, data: pa.Table, what: str) -> None:
    """One Delta commit appending `data` (prepared rows, any environments and runs) to
    `table`, creating the table on its first rows; `what` goes into the commit's metadata.
    A racing writer's commit is retried on top of it (both land); a new nullable column is
    added to the table's schema (older rows read it as null)."""
    from deltalake import CommitProperties, write_deltalake

    if data.num_rows == 0:
        return
    uri = lake.path(table)
    if not lake.remote:
        os.makedirs(uri, exist_ok=True)
    props = CommitProperties(
        custom_metadata={"yardstick.landing": what}, max_commit_retries=COMMIT_RETRIES
    )
    for attempt in range(3):
        try:
            with lakefs.storage_errors("commit", uri):
                write_deltalake(
                    uri,
                    data,
                    mode="append",
                    partition_by=PARTITION_BY,
                    schema_mode="merge",
                    configuration=TABLE_CONFIG,
                    storage_options=lake.storage_options,
                    commit_properties=props,
                )
            return
        except Exception as exc:
            # Two writers creating one table both try version 0: the loser appends after.
            if attempt == 2 or "already exists" not in str(exc).lower():
                raise
            time.sleep(0.05 * (attempt + 1))


def write(lake: Lake, table: str, env: str, run_id: str, data: pa.Table) -> int | None:
    """Land one run's rows of one table (one commit, or a part of the open `batch`'s); a
    table without rows lands nothing (steps say what ran). Returns the rows landed."""
    prepared = prepare(table, env, run_id, data)
    if prepared.num_rows == 0:
        return None
    held = _open_batch(lake)
    if held is not None:
        held.add(table, env, run_id, prepared)
        return prepared.num_rows
    if table in LANDED_ONCE and landed(lake, table, env, run_id):
        raise LakeConflict(
            f"{lake.path(table)}: run {run_id} of {env} already landed; "
            "the lake never overwrites a run's data"
        )
    append(lake, table, prepared, f"{env}/{run_id}")
    return prepared.num_rows


# --- batches: a collection's environments in one commit per table ------------------------


class Batch:
    """Rows waiting to be landed together (one commit per table, `runs` last)."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pa.Table]] = {}
        self.keys: set[tuple[str, str, str]] = set()
        self.lock = threading.Lock()

    def add(self, table: str, env: str, run_id: str, data: pa.Table) -> None:
        """Hold one run's rows of one table."""
        with self.lock:
            if table in LANDED_ONCE and (table, env, run_id) in self.keys:
                raise LakeConflict(f"{table}: run {run_id} of {env} already in this landing")
            self.keys.add((table, env, run_id))
            self.parts.setdefault(table, []).append(data)

    def commit(self, lake: Lake, what: str) -> int:
        """Land every held table: the others, then steps, then runs (the run counts last)."""
        order = sorted(self.parts, key=lambda t: (t == COMPLETES_A_RUN, t == "steps", t))
        for table in order:
            append(
                lake,
                table,
                pa.concat_tables(self.parts[table], promote_options="default"),
                what,
            )
        return len(order)


# The open batch of this context (threads started with contextvars.copy_context share it, as
# the collection's host-group threads are): (lake key, batch).
_BATCH: ContextVar[tuple[str, Batch] | None] = ContextVar("yardstick_lake_batch", default=None)


def _open_batch(lake: Lake) -> Batch | None:
    """The batch open for this lake in this context, if any."""
    held = _BATCH.get()
    return held[1] if held is not None and held[0] == lake.uri else None


@contextmanager
def batch(lake: Lake, what: str) -> Iterator[Batch]:
    """Every `write` to this lake inside the block (this context and threads copying it) is
    held, then landed as one commit per table when the block ends without an exception. A
    process killed inside the block lands nothing; one killed during the commits may have
    landed some tables but not `runs` (landed last): its runs never count."""
    if _BATCH.get() is not None:
        raise RuntimeError(f"{lake}: a landing batch is already open")
    held = Batch()
    token = _BATCH.set((lake.uri, held))
    try:
        yield held
    finally:
        _BATCH.reset(token)
    held.commit(lake, what)


# --- data files and reads -----------------------------------------------------------------


@dataclass(frozen=True)
class LakeFile:
    """One data file of a table's current version and what its log entry says of it."""

    table: str
    env: str
    period: str
    path: str  # an absolute local path, or an s3:// URL in an S3 lake
    min_run: str
    max_run: str
    rows: int
    size_bytes: int
    runs: tuple[str, ...] = ()  # filled by current_files only (reads the file)
    kind: str = "data"


def data_files(lake: Lake, table: str, envs: list[str] | None = None, dt=None) -> list[LakeFile]:
    """The data files of a table's current version (of `envs` only, when given), from its log:
    partition values and run_id statistics, no data file opened."""
    dt = dt if dt is not None else lake.table(table)
    if dt is None:
        return []
    actions = pa.table(dt.get_add_actions(flatten=True))
    root = lake.path(table)
    found = []
    names = set(actions.column_names)
    for row in actions.to_pylist():
        env = row.get("partition.env")
        if envs is not None and env not in envs:
            continue
        lo = row.get("min.run_id") if "min.run_id" in names else None
        hi = row.get("max.run_id") if "max.run_id" in names else None
        # Statistics are written by delta-rs for every file; an empty range reads the file.
        found.append(
            LakeFile(
                table,
                env,
                row.get("partition.period"),
                lakefs.join(root, unquote(row["path"])),
                lo or "",
                hi or "~",
                row.get("num_records") or 0,
                row.get("size_bytes") or 0,
            )
        )
    return found


def dataset(lake: Lake, table: str, envs: list[str] | None = None):
    """The table's current version as a pyarrow dataset (Delta's own reader: its log's files,
    `env` and `period` from the partition values), of `envs` only when given; None when
    nothing landed in it yet."""
    dt = lake.table(table)
    if dt is None:
        return None
    pruning = [("env", "in", sorted(envs))] if envs is not None else None
    with lakefs.storage_errors("reading the table log", lake.path(table)):
        return dt.to_pyarrow_dataset(file_pruning_predicate=pruning)


def read(
    lake: Lake,
    table: str,
    envs: list[str] | None = None,
    run_ids: set[str] | None = None,
    columns: list[str] | None = None,
) -> pa.Table:
    """Rows of a table (of `envs`, of `run_ids`) in its declared schema, with env and period,
    through Delta's reader (files whose run_id statistics miss the runs are not read)."""
    schema = pa.schema([*file_schema(table), ("env", pa.string()), ("period", pa.string())])
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    if envs is not None and not envs or run_ids is not None and not run_ids:
        return schema.empty_table()
    found = dataset(lake, table, envs)
    if found is None:
        return schema.empty_table()
    present = [c for c in schema.names if c in found.schema.names]
    where = ds.field("run_id").isin(sorted(run_ids)) if run_ids is not None else None
    with lakefs.storage_errors("reading", lake.path(table)):
        data = found.to_table(columns=present, filter=where)
    return _conform(data, schema)


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows in `schema` (a column the table never had is null; Delta's list items and
    string views cast back to the declared types)."""
    columns = []
    for field_ in schema:
        if field_.name in data.column_names:
            columns.append(data[field_.name].cast(field_.type))
        else:
            columns.append(pa.nulls(data.num_rows, field_.type))
    return pa.table(columns, schema=schema)


def landed(lake: Lake, table: str, env: str, run_id: str) -> bool:
    """Whether rows of this run of `env` are in `table` (a new run's id sorts above every
    file of its partition: the statistics skip every file, none is usually opened)."""
    return read(lake, table, [env], {run_id}, ["run_id"]).num_rows > 0


def complete_runs(lake: Lake, envs: list[str] | None = None) -> set[tuple[str, str]]:
    """(env, run_id) of every run that counts: its `runs` row has landed."""
    rows = read(lake, COMPLETES_A_RUN, envs, columns=["env", "run_id"])
    return set(zip(rows["env"].to_pylist(), rows["run_id"].to_pylist(), strict=True))


def read_file(f: LakeFile, columns: list[str] | None = None, run_ids=None) -> pa.Table:
    """One data file's rows (optionally some columns, some runs), with `env` and `period`:
    for the readers that keep a file list (collection cursors)."""
    filters = [("run_id", "in", sorted(run_ids))] if run_ids is not None else None
    # env and period are the partition's (in the path, not in the file).
    stored = [c for c in columns if c not in PARTITION_BY] if columns is not None else None
    data = lakefs.read_table(f.path, columns=stored, filters=filters)
    data = data.append_column("env", pa.array([f.env] * data.num_rows, pa.string()))
    return data.append_column("period", pa.array([f.period] * data.num_rows, pa.string()))


def run_ids_of(f: LakeFile) -> tuple[str, ...]:
    """The distinct run ids one data file holds (reads its run_id column)."""
    data = lakefs.read_table(f.path, columns=["run_id"])
    return tuple(sorted(set(pc.unique(data["run_id"]).to_pylist())))


def current_files(lake: Lake, tables: list[str] | None = None) -> list[LakeFile]:
    """Every data file of the tables' current versions, with the runs each holds (each file's
    run_id column is read: for inspection and tests; the tool's own readers use data_files)."""
    from yardstick.storage.schemas import TABLES

    found = []
    for table in tables or list(TABLES):
        for f in data_files(lake, table):
            found.append(LakeFile(**{**f.__dict__, "runs": run_ids_of(f)}))
    return found


def tables_present(lake: Lake) -> list[str]:
    """The declared tables that exist in the lake as Delta tables."""
    from yardstick.storage.schemas import TABLES

    names = set(lakefs.list_names(lake.uri))
    return [t for t in TABLES if t in names and "_delta_log" in lakefs.list_names(lake.path(t))]
