"""The warehouse: a DuckDB file the dbt project in yardstick/sql/ builds from the lake.

An update reads each Delta table's current file list from its log, opens only the files added
since the previous update (their run ids), loads into raw.raw_<table> only the rows of runs
not loaded before (complete runs: delta.COMPLETES_A_RUN), lists them in raw.batch_runs, and lets
dbt append them to the marts. Each layer is a schema (LAYERS): raw, staging, marts, reports,
and the tool's own state in `yardstick`; use_layers() lets a reader leave the schema out.
A full rebuild (first build, `full=True`, models or schema changed,
an earlier update that did not finish, a run arriving older than what is loaded) builds a
new file from every data file of the lake and swaps it in atomically.

The lake may be local or on S3 (yardstick/storage/lakefs.py); the warehouse is always a local file.
DuckDB reads an S3 lake's Parquet through s3fs registered on the loading connection
(`register_filesystem`: no httpfs extension, nothing downloaded, no secret stored in the
database); the paths it remembers (yardstick.files) are then s3:// URLs."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from yardstick import interrupt
from yardstick.storage import dbt, delta, derived, kept, lakefs, lakelock, plan
from yardstick.storage.lakefs import Lake

# Re-exported: callers open the warehouse for reading through the update module too.
from yardstick.storage.reading import (  # noqa: F401
    LAYERS,
    META,
    ReadConnection,
    connect_read_only,
    use_layers,
)
from yardstick.storage.reading import meta as _meta
from yardstick.storage.reading import quote as _quote
from yardstick.storage.schemas import (
    DETAIL_TABLES,
    LATE_TABLES,
    SCHEMA_VERSION,
    TABLES,
    file_schema,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# The warehouse's schemas: dbt's layers (sql/dbt_project.yml), the loader's batch tables in
# `raw`, the tool's own state in `yardstick`. Readers find names through this search path.
LOADED = "yardstick.loaded_runs"  # one row per (env, run) the marts hold
FILES = "yardstick.files"  # current lake files and the range of runs each holds
VERSIONS = "yardstick.versions"  # the Delta version of each table the last update read
PENDING = "yardstick.pending_runs"  # complete runs held back by until_run_id
BATCH = "raw.batch_runs"  # the runs this update adds (dbt's source lake.batch_runs)
# Runs with files in the lake but no `runs` row (still running, or crashed): state between
# updates, and the source of the crashed_runs model.
UNFINISHED = "raw.raw_unfinished_runs"
# A full rebuild loads and builds at most this many runs at a time, and never two periods at
# once: its memory follows the largest month, not the history (see _rebuild_batches).
REBUILD_BATCH_RUNS = 1_000_000
# The first batch of a rebuild creates everything; later batches and updates only add rows
# (views and seeds exist since then).
FULL_ARGS = ["build", "--full-refresh", "--resource-type", "seed", "--resource-type", "model"]
INCREMENTAL_ARGS = ["run", "--exclude", "config.materialized:view"]


@dataclass
class UpdateResult:
    """What one warehouse update did."""

    path: Path
    mode: str  # full | incremental | up-to-date
    reason: str
    runs_added: int
    files_read: int
    load_s: float = 0.0
    models_s: float = 0.0
    wall_s: float = 0.0
    nodes: list[tuple[str, str, float]] = field(default_factory=list)
    # How dbt came by the project's parse (reused, partial, full and why).
    parse_mode: str = ""
    batches: int = 1  # a full rebuild's bounded batches (periods)
    # A rebuild's runs imported from the lake's derived tables (closed days), not re-derived.
    from_derived: int = 0


def _set_meta(con: duckdb.DuckDBPyConnection, **values: str) -> None:
    """Upsert meta keys."""
    for key, value in values.items():
        con.execute(f"delete from {META} where key = ?", [key])
        con.execute(f"insert into {META} values (?, ?)", [key, value])


def _expected_meta() -> dict[str, str]:
    """What the meta must say for an incremental update to be allowed."""
    return {"models_digest": dbt.models_digest(), "schema_version": str(SCHEMA_VERSION)}


@dataclass
class Survey:
    """What the lake holds now, as far as an update needs to know."""

    ranges: dict[str, tuple[str, str, delta.LakeFile]]  # current files: (min run, max run, file)
    candidates: set[tuple[str, str]]  # (env, run) whose `runs` row is in a file not seen before
    # (env, run) -> tables, for runs in other files not seen before: a run whose `runs` row
    # never comes (a killed run) is only ever listed, never loaded.
    others: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)  # table -> Delta version read
    fresh: set[str] = field(default_factory=set)  # paths of the files not seen before
    # An update's first batch also loads the rows of LATE_TABLES, in fresh files, of runs
    # loaded before that started on or after this day (YYYYMMDD; see _load_batch).
    late_since: str | None = None


def _survey(lake: Lake, known: dict[str, tuple[str, str]], versions: dict[str, int]) -> Survey:
    """The data files of every table's current Delta version (from its log); only the files
    added since the version the previous update read are opened (their run_id column), so the
    cost follows what changed, not the history (a compaction's new files are read once)."""
    ranges: dict[str, tuple[str, str, delta.LakeFile]] = {}
    candidates: set[tuple[str, str]] = set()
    others: dict[tuple[str, str], set[str]] = {}
    seen: dict[str, int] = {}
    fresh: set[str] = set()
    # The runs table first, so that the other tables' runs already known complete are not
    # listed again as possibly unfinished.
    for table in sorted(TABLES, key=lambda t: t != delta.COMPLETES_A_RUN):
        dt = lake.table(table)
        if dt is None:
            continue
        seen[table] = dt.version()
        for f in delta.data_files(lake, table, dt=dt):
            path = str(f.path)
            if path in known:
                ranges[path] = (*known[path], f)
                continue
            fresh.add(path)
            if f.min_run and f.min_run == f.max_run:
                # One run's file (every landing, every detail file): its statistics say
                # which run; only files merged by a compaction are opened.
                runs: tuple[str, ...] = (f.min_run,)
            else:
                runs = delta.run_ids_of(f) or ("",)
            ranges[path] = (min(runs), max(runs), f)
            if table == delta.COMPLETES_A_RUN:
                candidates.update((f.env, run) for run in runs)
            else:
                for run in runs:
                    if (f.env, run) not in candidates:
                        others.setdefault((f.env, run), set()).add(table)
    return Survey(ranges, candidates, others, seen, fresh)


def _save_survey(con: duckdb.DuckDBPyConnection, survey: Survey, pending: set) -> None:
    """Remember the current files (with their run ranges), the table versions read and the
    held-back runs."""
    files = pa.table(
        {
            "path": pa.array(list(survey.ranges), pa.string()),
            "table_name": pa.array([f.table for _, _, f in survey.ranges.values()], pa.string()),
            "env": pa.array([f.env for _, _, f in survey.ranges.values()], pa.string()),
            "min_run": pa.array([lo for lo, _, _ in survey.ranges.values()], pa.string()),
            "max_run": pa.array([hi for _, hi, _ in survey.ranges.values()], pa.string()),
        }
    )
    versions = pa.table(
        {
            "table_name": pa.array(list(survey.versions), pa.string()),
            "version": pa.array(list(survey.versions.values()), pa.int64()),
        }
    )
    held = pa.table(
        {
            "env": pa.array([e for e, _ in sorted(pending)], pa.string()),
            "run_id": pa.array([r for _, r in sorted(pending)], pa.string()),
        }
    )
    for name, data in ((FILES, files), (VERSIONS, versions), (PENDING, held)):
        con.register("survey_rows", data)
        con.execute(f"create or replace table {name} as select * from survey_rows")
        con.unregister("survey_rows")


def _read_survey(con: duckdb.DuckDBPyConnection) -> tuple[dict, dict[str, int], set]:
    """The files, table versions and held-back runs the previous update remembered."""
    known = {
        path: (lo, hi)
        for path, lo, hi in con.execute(f"select path, min_run, max_run from {FILES}").fetchall()
    }
    try:
        versions = dict(con.execute(f"select table_name, version from {VERSIONS}").fetchall())
    except duckdb.CatalogException:
        versions = {}  # a warehouse of the earlier lake format: every file is new to it
    pending = set(con.execute(f"select env, run_id from {PENDING}").fetchall())
    return known, versions, pending


def _save_unfinished(
    con: duckdb.DuckDBPyConnection, survey: Survey, complete: set[tuple[str, str]]
) -> None:
    """Keep the runs that have files but no `runs` row: those listed before and those in the
    survey's new files, less runs whose row has landed since (or was loaded before)."""
    unfinished: dict[tuple[str, str], set[str]] = {}
    try:
        for env, run, tables in con.execute(
            f"select env, run_id, tables from {UNFINISHED}"
        ).fetchall():
            unfinished[(env, run)] = set(tables)
    except duckdb.CatalogException:
        pass  # the first update of this warehouse
    for key, tables in survey.others.items():
        unfinished.setdefault(key, set()).update(tables)
    for key in complete:
        unfinished.pop(key, None)
    if unfinished:
        con.register("unfinished_rows", _runs_table(set(unfinished)))
        try:
            loaded = set(
                con.execute(
                    f"select l.env, l.run_id from {LOADED} as l "
                    "semi join unfinished_rows as u on u.env = l.env and u.run_id = l.run_id"
                ).fetchall()
            )
        finally:
            con.unregister("unfinished_rows")
        for key in loaded:
            unfinished.pop(key, None)
    _write_unfinished(con, unfinished)


def _write_unfinished(
    con: duckdb.DuckDBPyConnection, unfinished: dict[tuple[str, str], set]
) -> None:
    """raw.raw_unfinished_runs: each unfinished run with the tables it has files in."""
    ordered = sorted(unfinished)
    rows = pa.table(
        {
            "env": pa.array([env for env, _ in ordered], pa.string()),
            "run_id": pa.array([run for _, run in ordered], pa.string()),
            "tables": pa.array([sorted(unfinished[k]) for k in ordered], pa.list_(pa.string())),
        }
    )
    con.register("unfinished_rows", rows)
    con.execute(f"create or replace table {UNFINISHED} as select * from unfinished_rows")
    con.unregister("unfinished_rows")


def _runs_table(runs: set[tuple[str, str]]) -> pa.Table:
    """(env, run_id) pairs as an Arrow table, sorted (inserted in one statement, not row by row)."""
    ordered = sorted(runs)
    return pa.table(
        {
            "env": pa.array([e for e, _ in ordered], pa.string()),
            "run_id": pa.array([r for _, r in ordered], pa.string()),
        }
    )


def _append_loaded(con: duckdb.DuckDBPyConnection, runs: set[tuple[str, str]]) -> None:
    """Record runs as loaded into the marts."""
    con.register("loaded_rows", _runs_table(runs))
    con.execute(f"insert into {LOADED} select env, run_id from loaded_rows")
    con.unregister("loaded_rows")


def _new_runs(
    con: duckdb.DuckDBPyConnection, candidates: set[tuple[str, str]]
) -> tuple[set[tuple[str, str]], dict[str, str]]:
    """Candidates not loaded yet, and the latest loaded run of each of their environments."""
    if not candidates:
        return set(), {}
    con.register("candidates", _runs_table(candidates))
    try:
        lowest = min(run for _, run in candidates)
        # Loaded runs are appended in time order: the bound lets DuckDB skip older row groups.
        new = set(
            con.execute(
                "select c.env, c.run_id from candidates as c anti join "
                f"(select * from {LOADED} where run_id >= ?) as l "
                "on l.env = c.env and l.run_id = c.run_id",
                [lowest],
            ).fetchall()
        )
        latest = dict(
            con.execute(
                f"select env, max(run_id) from {LOADED} "
                "semi join (select distinct env from candidates) using (env) group by env"
            ).fetchall()
        )
    finally:
        con.unregister("candidates")
    return new, latest


def _load_batch(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    survey: Survey,
    batch: set[tuple[str, str]],
    late_since: str | None = None,
) -> int:
    """Create raw.raw_<table> with the rows of the batch's runs, and raw.batch_runs; return the
    number of files read. Detail tables (per key, per bucket) of a local lake are views over
    the batch's files: the models aggregate them where they lie and the warehouse never holds
    a copy. With `late_since`, the rows of LATE_TABLES in files not seen before also come for
    runs loaded earlier that started no earlier than it (a run's late phases: their model
    replaces a row loaded again by its key)."""
    con.register("batch_rows", _runs_table(batch))
    con.execute(f"create or replace table {BATCH} as select env, run_id from batch_rows")
    con.unregister("batch_rows")
    bounds: dict[str, tuple[str, str]] = {}
    for env, run in batch:
        lo, hi = bounds.get(env, (run, run))
        bounds[env] = (min(lo, run), max(hi, run))
    # A file is read only if its run range meets the batch's range for its environment.
    by_table: dict[str, list[delta.LakeFile]] = {}
    for lo, hi, f in survey.ranges.values():
        want = bounds.get(f.env)
        if want and lo <= want[1] and hi >= want[0]:
            by_table.setdefault(f.table, []).append(f)
    lowest = min(run for _, run in batch) if batch else ""
    highest = max(run for _, run in batch) if batch else ""
    if lake.remote:
        lakefs.register(con)
    read = 0
    for table in TABLES:
        late = late_since is not None and table in LATE_TABLES
        if late:
            for _lo, hi, f in survey.ranges.values():
                if f.table == table and str(f.path) in survey.fresh and hi >= late_since:
                    if f not in by_table.setdefault(table, []):
                        by_table[table].append(f)
        # Oldest runs first, as they landed: the rows enter raw_<table> in time order.
        chosen = sorted(by_table.get(table, []), key=lambda f: (f.min_run, str(f.path)))
        read += len(chosen)
        _drop_relation(con, "raw", f"raw_{table}")
        if table in DETAIL_TABLES and chosen and not lake.remote:
            # A view: dbt's connection reads the files itself (local paths need nothing
            # registered); on S3 the batch's rows are copied like any other table's.
            select = _detail_select(con, lake, table, BATCH)
            con.execute(
                f"create view raw.raw_{table} as {select} "
                f"where t.run_id between {_quote(lowest)} and {_quote(highest)}"
            )
            continue
        empty = file_schema(table).empty_table()  # noqa: F841 - read by DuckDB's replacement scan
        con.execute(
            f"create table raw.raw_{table} as "
            f"select *, null::varchar as env, null::date as date from empty"
        )
        if not chosen:
            continue
        paths = pa.table(
            {"filename": [str(f.path) for f in chosen], "file_env": [f.env for f in chosen]}
        )
        con.register("lake_paths", paths)
        listing = "[" + ", ".join(_quote(str(f.path)) for f in chosen) + "]"
        # Files written under an older schema lack newer columns: by-name insert leaves them
        # null. Compacted files hold runs already loaded: the range skips their older row
        # groups (they are sorted by run id), the semi join keeps exactly the batch.
        runs, low = BATCH, lowest
        if late:
            runs = f"(from {BATCH} union all select env, run_id from {LOADED} where run_id >= ?)"
            low = min(lowest or late_since, late_since)
        con.execute(
            f"insert into raw.raw_{table} by name "
            f"select t.* exclude (filename), p.file_env as env, "
            f"strptime(left(t.run_id, 8), '%Y%m%d')::date as date "
            f"from read_parquet({listing}, filename = true, union_by_name = true, "
            f"hive_partitioning = false) as t "
            f"join lake_paths as p on p.filename = t.filename "
            f"semi join {runs} as b on b.env = p.file_env and b.run_id = t.run_id "
            f"where t.run_id between ? and ?",
            ([late_since] if late else []) + [low, highest],
        )
        con.unregister("lake_paths")
    return read


def _detail_select(con: duckdb.DuckDBPyConnection, lake: Lake, table: str, runs: str) -> str:
    """A select of a detail table's rows in raw_<table>'s shape (file columns, env from the
    file's folder, date from the run id) for the runs listed in the relation `runs` (env,
    run_id), read from every data file of the table (a glob: detail tables are never
    compacted, retention vacuums the files it deletes at once, and a view naming files would
    fail once retention deleted one). A typed empty table stands
    first, so columns that older files lack are null and every column keeps its type."""
    typed = f"yardstick.empty_{table}"
    empty = file_schema(table).empty_table()  # noqa: F841 - read by DuckDB's replacement scan
    con.execute(
        f"create or replace table {typed} as "
        f"select *, null::varchar as env, null::date as date from empty"
    )
    if not delta.data_files(lake, table):
        return f"select * from {typed}"  # read_parquet refuses a pattern that matches nothing
    root = lake.uri
    env = "regexp_extract(t.filename, '/env=([^/]+)/', 1)"
    return (
        f"select * from {typed} union all by name "
        f"select t.* exclude (filename), {env} as env, "
        f"strptime(left(t.run_id, 8), '%Y%m%d')::date as date "
        f"from read_parquet({_quote(f'{root}/{table}/env=*/*/*.parquet')}, filename = true, "
        f"union_by_name = true, hive_partitioning = false) as t "
        f"semi join {runs} as b on b.env = {env} and b.run_id = t.run_id"
    )


def _drop_relation(con: duckdb.DuckDBPyConnection, schema: str, name: str) -> None:
    """Drop a table or view of that name, whichever it is (DuckDB refuses the wrong kind)."""
    kinds = con.execute(
        "select table_type from information_schema.tables "
        "where table_schema = ? and table_name = ?",
        [schema, name],
    ).fetchall()
    for (kind,) in kinds:
        con.execute(f"drop {'view' if kind == 'VIEW' else 'table'} {schema}.{name}")


def _detail_views(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    """`marts.keyspace_keys` and `marts.ping_histogram`: every detail row of the loaded runs
    still in the lake (retention drops them after `detail_days`), read in place at query time."""
    if lake.remote:
        lakefs.register(con)
    for table in DETAIL_TABLES:
        _drop_relation(con, "marts", table)
        select = _detail_select(con, lake, table, LOADED)
        con.execute(f"create view marts.{table} as {select}")


def _checkpoint(path: Path) -> None:
    """Fold the file's WAL into it (a file copied or kept must hold every commit)."""
    con = _connect(path)
    try:
        con.execute("checkpoint")
    finally:
        con.close()


def _connect(path: Path) -> duckdb.DuckDBPyConnection:
    """Open the warehouse for writing (the loader's part of an update), bounded in memory
    like dbt's connection (dbt.duckdb_settings), with the schemas the loader writes to."""
    con = duckdb.connect(str(path), config=dbt.duckdb_settings())
    # The replayed models' long queries would draw DuckDB's progress bar on the terminal.
    con.execute("set enable_progress_bar = false")
    for schema in ("raw", "yardstick", "marts"):
        con.execute(f"create schema if not exists {schema}")
    return con


def update(
    lake: Lake,
    warehouse_path: str | Path,
    full: bool = False,
    until_run_id: str | None = None,
) -> UpdateResult:
    """Bring the warehouse up to date with the lake: incrementally when it can, else rebuilt.

    `until_run_id` loads only runs started no later than it (the nightly flow passes its own
    run id): a collection that began after the nightly run may still be waiting for its host
    and land after this update; taken now, its earlier neighbours would arrive late tomorrow
    and force a full rebuild. One update of a warehouse at a time (a lock across threads and
    processes): a second one waits, then finds the lake already loaded."""
    warehouse_path = Path(warehouse_path)
    warehouse_path.parent.mkdir(parents=True, exist_ok=True)
    who = f"run {until_run_id}" if until_run_id else None
    # The lake first, then the warehouse (a retention pass holds them in that order too).
    with lakelock.lake_read(lake), dbt.locked(warehouse_path, who=who):
        if not full and (stale := stale_wal(warehouse_path)):
            # Left by a writer killed after a commit and before its checkpoint (or by someone
            # else's session): replayed, it would bring back whatever that writer had done.
            log.warning(
                "warehouse %s: %s left by a killed writer is not replayed; "
                "the warehouse is rebuilt from the lake",
                warehouse_path,
                stale.name,
            )
            return _rebuild(
                lake,
                warehouse_path,
                f"a stale {stale.name} (not replayed)",
                time.perf_counter(),
                until_run_id,
            )
        return _update(lake, warehouse_path, full, until_run_id)


def stale_wal(warehouse_path: Path) -> Path | None:
    """The warehouse's write-ahead log when one is there before an update: every writer of
    the tool checkpoints before it closes, so a WAL is a killed writer's (None without one)."""
    wal = warehouse_path.with_name(warehouse_path.name + ".wal")
    try:
        return wal if wal.stat().st_size > 0 else None
    except FileNotFoundError:
        return None


def held_by(warehouse_path: Path) -> str | None:
    """The process holding the warehouse open (a `duckdb -readonly` session, another
    program's read-only connection), as DuckDB names it; None when it can be written in
    place. DuckDB lets one process write a file and only when no other process reads it."""
    if not warehouse_path.exists():
        return None
    try:
        con = duckdb.connect(str(warehouse_path), config=dbt.duckdb_settings())
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" not in text.lower():
            raise
        found = re.search(r"held in (\S+) \(PID (\d+)\)", text)
        return f"{found.group(1)} (pid {found.group(2)})" if found else "another process"
    con.close()
    return None


def _wanted(complete: set[tuple[str, str]], until_run_id: str | None) -> set[tuple[str, str]]:
    """The complete runs an update may load (those started no later than `until_run_id`)."""
    if until_run_id is None:
        return complete
    return {(env, run) for env, run in complete if run <= until_run_id}


def _update(lake: Lake, warehouse_path: Path, full: bool, until_run_id: str | None) -> UpdateResult:
    """update() under the warehouse's lock."""
    start = time.perf_counter()
    # Under the lock, a building folder is a killed update's: gone before anything else, also
    # when this update replays in place and never makes a copy.
    _clear_killed_rebuild(warehouse_path)
    reason = "asked for a full rebuild" if full else ""
    if not full and not warehouse_path.exists():
        reason = "no warehouse yet"
    known: dict[str, tuple[str, str]] = {}
    pending: set[tuple[str, str]] = set()
    if not reason:
        try:
            con = duckdb.connect(str(warehouse_path), read_only=True)
        except duckdb.Error as exc:
            reason = f"the warehouse could not be opened ({str(exc).splitlines()[0]})"
        else:
            try:
                meta = _meta(con)
                expected = _expected_meta()
                if not meta:
                    reason = "the warehouse was built by an earlier version of the tool"
                elif meta.get("state") != "ok":
                    # Only an earlier version's update leaves this (its models committed one
                    # by one): an update now commits whole or not at all.
                    reason = "an update by an earlier version of the tool did not finish"
                elif meta.get("models_digest") != expected["models_digest"]:
                    reason = "the SQL models changed"
                elif meta.get("schema_version") != expected["schema_version"]:
                    reason = "the lake schema changed"
                else:
                    known, versions, pending = _read_survey(con)
                    survey = _survey(lake, known, versions)
                    new, latest = _new_runs(con, survey.candidates | pending)
            finally:
                con.close()
    if reason:
        return _rebuild(lake, warehouse_path, reason, start, until_run_id)
    held = held_by(warehouse_path)
    if held:
        log.info(
            "warehouse %s: open in %s; updated on a copy swapped into place (that reader "
            "keeps the version it opened)",
            warehouse_path,
            held,
        )

    batch = _wanted(new, until_run_id)
    later = new - batch
    if not batch:
        # Late rows of loaded runs wait for the next update that loads runs: their files
        # stay unseen until then.
        waiting = {
            path
            for path, (_, _, f) in survey.ranges.items()
            if path in survey.fresh and f.table in LATE_TABLES
        }
        survey.ranges = {p: r for p, r in survey.ranges.items() if p not in waiting}

        def save(target: Path) -> None:
            """Remember what this update saw of the lake."""
            con = _connect(target)
            try:
                con.execute("begin")
                _save_survey(con, survey, later)
                _save_unfinished(con, survey, survey.candidates | pending)
                con.execute("commit")
            finally:
                con.close()

        _in_place(warehouse_path, held, save)
        return UpdateResult(
            warehouse_path,
            "up-to-date",
            "nothing new in the lake",
            0,
            0,
            wall_s=time.perf_counter() - start,
        )
    late = sorted((env, run) for env, run in batch if run < latest.get(env, ""))
    if late:
        env, run = late[0]
        why = f"run {run} of {env} arrived after later runs were loaded"
        return _rebuild(lake, warehouse_path, why, start, until_run_id)

    parts = _split(batch)

    def add_parts(target: Path) -> list[_Applied]:
        """Add the parts one after the other to `target` (the warehouse, or its copy)."""
        done: list[_Applied] = []
        for index, part in enumerate(parts):
            _checkpoint_if_closed(target, lake, _first_day(part))
            # The first part also brings the late rows (the tool's warehouse and rendering
            # phases) of the runs the previous updates loaded: two days back covers a
            # nightly run's, landed after its own update.
            survey.late_since = _days_before(_first_day(part), 2) if index == 0 else None
            pending_after = later.union(*parts[index + 1 :])

            def remember(
                con: duckdb.DuckDBPyConnection, pending_after: set = pending_after
            ) -> None:
                """What this update saw of the lake, kept with each part it loads (the runs of
                its later parts stay pending: a kill between parts loses none)."""
                _detail_views(con, lake)
                _save_survey(con, survey, pending_after)
                _save_unfinished(con, survey, survey.candidates | pending)

            part_applied = _replay_batch(target, lake, survey, part, remember)
            if part_applied is None and target == warehouse_path:
                part_applied = _dbt_batch_on_copy(warehouse_path, lake, survey, part, remember)
            elif part_applied is None:  # already on a copy
                part_applied = _dbt_batch(target, lake, survey, part, remember, warehouse_path)
            done.append(part_applied)
        return done

    applied = _Applied.total(_in_place(warehouse_path, held, add_parts))
    log.info(
        "warehouse %s: %d new runs (load %.1f s, models %.1f s); %s",
        warehouse_path,
        len(batch),
        applied.load_s,
        applied.models_s,
        applied.parse_mode,
    )
    return UpdateResult(
        warehouse_path,
        "incremental",
        f"{len(batch)} new runs",
        len(batch),
        applied.read,
        applied.load_s,
        applied.models_s,
        time.perf_counter() - start,
        applied.nodes,
        applied.parse_mode,
    )


@dataclass
class _Applied:
    """What adding one batch to the marts did."""

    read: int  # lake files read
    load_s: float
    models_s: float
    nodes: list[tuple[str, str, float]]
    parse_mode: str

    @staticmethod
    def total(parts: list[_Applied]) -> _Applied:
        """What several batches did together."""
        return _Applied(
            sum(p.read for p in parts),
            sum(p.load_s for p in parts),
            sum(p.models_s for p in parts),
            [node for p in parts for node in p.nodes],
            "; ".join(dict.fromkeys(p.parse_mode for p in parts)),
        )


def _days_before(day: str, days: int) -> str:
    """The day (YYYYMMDD) `days` before `day`."""
    return (datetime.strptime(day, "%Y%m%d") - timedelta(days=days)).strftime("%Y%m%d")


def _first_day(runs: set[tuple[str, str]]) -> str:
    """The earliest run's day (YYYYMMDD)."""
    return min(run for _, run in runs)[:8]


def _checkpoint_if_closed(path: Path, lake: Lake, next_day: str) -> None:
    """Before loading runs of `next_day`: when the warehouse stands at the end of an earlier
    day (every run it loaded is of an earlier day) and loaded runs since its last checkpoint,
    keep what it derived for them in the lake (yardstick/storage/derived.py). A failure
    costs a later rebuild those days' work, never this update."""
    con = _connect(path)
    try:
        meta = _meta(con)
        after_day = meta.get("checkpoint_day", derived.NO_DAY)
        top = con.execute(f"select max(run_id) from {LOADED}").fetchone()[0]
        if not top or not after_day < top[:8] < next_day:
            return
        through_day = top[:8]
        runs = con.execute(
            f"select env, run_id from {LOADED} where run_id > ? and run_id < ?",
            [f"{after_day}~", f"{through_day}~"],
        ).fetchall()
        try:
            made = derived.export(
                con,
                lake,
                meta.get("checkpoint_id", ""),
                after_day,
                through_day,
                runs,
                dbt.models_digest(),
                SCHEMA_VERSION,
            )
        except (interrupt.Interrupted, KeyboardInterrupt):
            raise
        except Exception as exc:
            log.warning(
                "warehouse %s: days %s..%s not kept in the lake (%s); a rebuild derives them",
                path,
                after_day,
                through_day,
                lakefs.describe_error(exc),
            )
            return
        _set_meta(con, checkpoint_id=made.checkpoint, checkpoint_day=through_day)
    finally:
        con.close()


def _load(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    survey: Survey,
    batch: set[tuple[str, str]],
    remember: Callable[[duckdb.DuckDBPyConnection], None] | None,
) -> int:
    """The batch into raw.*, and what the update keeps of the lake (`remember`); files read."""
    _set_meta(con, lake=str(lake))
    read = _load_batch(con, lake, survey, batch, survey.late_since)
    if remember is not None:
        remember(con)
    return read


def _replay_batch(
    path: Path,
    lake: Lake,
    survey: Survey,
    batch: set[tuple[str, str]],
    remember: Callable[[duckdb.DuckDBPyConnection], None] | None,
) -> _Applied | None:
    """Add the batch in one transaction: load it, replay the models' recorded plan
    (yardstick/storage/plan.py) and mark its runs loaded. A process killed at any point leaves
    the warehouse as the previous update left it, so the next update loads the same runs again.
    None, with nothing changed, when the warehouse holds no plan recorded for what it is now."""
    from yardstick import interrupt

    load_start = time.perf_counter()
    con = _connect(path)
    try:
        con.execute("begin")
        read = _load(con, lake, survey, batch, remember)
        plan_key = plan.key(con, dbt.models_digest(), INCREMENTAL_ARGS)
        recorded = plan.stored(con, plan_key)
        if recorded is None:
            # Another warehouse of the same key recorded it (kept.py): this one keeps it too.
            recorded = kept.plan(plan_key)
            if recorded is None:
                return None  # closing rolls back
            plan.save(con, recorded, plan_key)
        models_start = time.perf_counter()
        load_s = models_start - load_start
        try:
            with _interrupted_on_stop(con):
                nodes = plan.replay(con, recorded)
        except duckdb.Error as exc:
            if interrupt.STOP.is_set():
                raise interrupt.Interrupted(
                    f"{interrupt.stop_reason()}: warehouse update stopped"
                ) from None
            # Not expected (the key covers what the statements depend on): dbt runs the
            # models instead, says which failed if one does, and records a new plan.
            log.warning(
                "warehouse %s: the recorded dbt plan failed (%s); dbt runs the models",
                path,
                str(exc).splitlines()[0],
            )
            return None
        _append_loaded(con, batch)
        con.execute("commit")
        con.execute("checkpoint")
        models_s = time.perf_counter() - models_start
    finally:
        con.close()
    return _Applied(read, load_s, models_s, nodes, "recorded dbt plan replayed (dbt not started)")


@contextmanager
def _interrupted_on_stop(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """A stop request (Ctrl-C, SIGTERM: yardstick/interrupt.py) interrupts the query running on
    `con` within a fraction of a second, also when the update runs outside the main thread
    (where no signal handler can raise)."""
    from yardstick import interrupt

    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            if interrupt.STOP.is_set():
                con.interrupt()
                return

    watcher = threading.Thread(target=watch, name="warehouse-stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join(timeout=5)


def _dbt_batch(
    path: Path,
    lake: Lake,
    survey: Survey,
    batch: set[tuple[str, str]],
    remember: Callable[[duckdb.DuckDBPyConnection], None] | None,
    state_for: Path,
) -> _Applied:
    """Add the batch with dbt itself, recording what it runs as the warehouse's plan for the
    next updates. Not atomic (dbt commits each model): callers run it on a copy or a rebuild's
    file, never on the warehouse in place."""
    load_start = time.perf_counter()
    con = _connect(path)
    try:
        con.execute("begin")
        read = _load(con, lake, survey, batch, remember)
        plan_key = plan.key(con, dbt.models_digest(), INCREMENTAL_ARGS)
        con.execute("commit")
    finally:
        con.close()
    models_start = time.perf_counter()
    load_s = models_start - load_start
    result = dbt.run(path, INCREMENTAL_ARGS, state_for=state_for, record=True)
    recorded = plan.from_recording(result.queries or [])
    con = _connect(path)
    try:
        con.execute("begin")
        _append_loaded(con, batch)
        if recorded:
            plan.save(con, recorded, plan_key)
        else:
            plan.forget(con)
        con.execute("commit")
    finally:
        con.close()
    if recorded:
        kept.keep_plan(recorded, plan_key)
    models_s = time.perf_counter() - models_start
    return _Applied(read, load_s, models_s, result.nodes, f"dbt {result.parse_mode}, plan recorded")


def _dbt_batch_on_copy(
    warehouse_path: Path,
    lake: Lake,
    survey: Survey,
    batch: set[tuple[str, str]],
    remember: Callable[[duckdb.DuckDBPyConnection], None],
) -> _Applied:
    """_dbt_batch on a copy of the warehouse, swapped into place when done: a process killed
    halfway leaves the warehouse as it was (and a copy the next update removes)."""
    return _on_copy(
        warehouse_path,
        lambda tmp: _dbt_batch(tmp, lake, survey, batch, remember, warehouse_path),
    )


def _in_place(warehouse_path: Path, held: str | None, work: Callable[[Path], T]) -> T:
    """`work` on the warehouse itself, or on a copy swapped in when another process holds
    the file open (`held`): DuckDB writes only a file no other process has open."""
    return _on_copy(warehouse_path, work) if held else work(warehouse_path)


def _on_copy(warehouse_path: Path, work: Callable[[Path], T]) -> T:
    """`work` on a copy of the warehouse in the rebuild's hidden folder, swapped into place
    when done (os.replace: a reader holding the old file keeps reading it); a process killed
    halfway leaves the warehouse as it was, and a folder the next update removes."""
    tmp = building_path(warehouse_path)
    _clear_killed_rebuild(warehouse_path)
    tmp.parent.mkdir(parents=True)
    try:
        if stale_wal(warehouse_path):  # committed changes not in the file yet: fold them in
            _checkpoint(warehouse_path)
        shutil.copyfile(warehouse_path, tmp)
        done = work(tmp)
        _checkpoint(tmp)
    except BaseException:
        _remove_building(warehouse_path)
        raise
    _swap_in(tmp, warehouse_path)
    return done


def _swap_in(tmp: Path, warehouse_path: Path) -> None:
    """Put a finished file (a rebuild, an update on a copy) in the warehouse's place."""
    # A WAL beside the old file belongs to the old file: it must not meet the new one.
    warehouse_path.with_name(warehouse_path.name + ".wal").unlink(missing_ok=True)
    os.replace(tmp, warehouse_path)
    _remove_building(warehouse_path)


def _split(runs: set[tuple[str, str]]) -> list[set[tuple[str, str]]]:
    """Runs in the batches an update (or a rebuild) loads one after the other, oldest first:
    one period (UTC month) at a time, at most REBUILD_BATCH_RUNS runs each, and the latest
    day's runs apart from the closed days before them (a checkpoint of the closed days is
    taken between: yardstick/storage/derived.py). Each batch is what an incremental update
    of those runs would add, so the marts come out as a sequence of updates makes them."""
    batches: list[set[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    latest = max((run[:8] for _, run in runs), default="")
    for env, run in sorted(runs, key=lambda key: (key[1], key[0])):
        if current and (
            delta.run_period(run) != delta.run_period(current[-1][1])
            or len(current) >= REBUILD_BATCH_RUNS
            or (run[:8] == latest and current[-1][1][:8] != latest)
        ):
            batches.append(set(current))
            current = []
        current.append((env, run))
    if current or not batches:  # the last batch, or one empty batch for an empty lake
        batches.append(set(current))
    return batches


def building_path(warehouse_path: Path) -> Path:
    """Where a full rebuild builds: a hidden folder beside the warehouse holding a file of the
    same name (dbt-duckdb names the database after the file, and dbt's parse follows that
    name: the same name lets the update after a rebuild reuse the rebuild's parse)."""
    return warehouse_path.with_name(f".{warehouse_path.name}.building") / warehouse_path.name


def _remove_building(warehouse_path: Path) -> list[Path]:
    """Remove a rebuild's folder (or an older version's file and WAL); what was there."""
    folder = building_path(warehouse_path).parent
    found = [p for p in (folder, folder.with_name(folder.name + ".wal")) if p.exists()]
    for leftover in found:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    return found


def _clear_killed_rebuild(warehouse_path: Path) -> None:
    """Before a rebuild (or an update on a copy): remove what a killed one left, and say so."""
    for leftover in _remove_building(warehouse_path):
        log.warning("removed %s, left by a rebuild or update that was killed", leftover)


def _rebuild(
    lake: Lake,
    warehouse_path: Path,
    reason: str,
    start: float,
    until_run_id: str | None,
) -> UpdateResult:
    """Build a new warehouse from every current lake file, a month at a time (bounded memory),
    and swap it into place."""
    from yardstick.storage import migrate

    # A lake still (or partly) in the earlier format would build without those rows.
    migrate.refuse_unmigrated(lake)
    tmp = building_path(warehouse_path)
    _clear_killed_rebuild(warehouse_path)
    tmp.parent.mkdir(parents=True)
    load_s = models_s = 0.0
    nodes: list[tuple[str, str, float]] = []
    try:
        load_start = time.perf_counter()
        survey = _survey(lake, {}, {})
        complete = _wanted(survey.candidates, until_run_id)
        # Closed days whose marts the lake already keeps are imported, not derived again.
        found = derived.chain(lake, complete, dbt.models_digest(), SCHEMA_VERSION)
        through_day = found[-1].through_day if found else derived.NO_DAY
        covered = {(env, run) for env, run in complete if run[:8] <= through_day}
        # The first step creates every relation, empty; each batch of runs is then an
        # incremental update of the file being built (dbt records its statements once, the
        # batches after replay them), so a rebuild's marts are what a sequence of updates
        # makes. Each month done is kept in the lake: a rebuild killed after it starts there.
        batches = [batch for batch in _split(complete - covered) if batch]
        if not batches and survey.others:
            batches = [set()]  # no run to add, but crashed runs for the models to list
        load_s += time.perf_counter() - load_start
        models_start = time.perf_counter()
        nodes, created = _create_empty(tmp, lake, survey, warehouse_path)
        modes = [created]
        models_s += time.perf_counter() - models_start
        con = _connect(tmp)
        try:
            _set_meta(con, state="updating", lake=str(lake))
            _save_survey(con, survey, survey.candidates - complete)
            _save_unfinished(con, survey, survey.candidates)
            if found:
                load_s += _import_derived(con, lake, found, covered, warehouse_path)
        finally:
            con.close()
        read = 0
        for batch in batches:
            _checkpoint_if_closed(tmp, lake, _first_day(batch))
            applied = _replay_batch(tmp, lake, survey, batch, None) or _dbt_batch(
                tmp, lake, survey, batch, None, warehouse_path
            )
            read += applied.read
            load_s += applied.load_s
            models_s += applied.models_s
            nodes += applied.nodes
            modes.append(applied.parse_mode)
        parse_mode = "; ".join(dict.fromkeys(modes))
        con = _connect(tmp)
        try:
            _set_meta(
                con,
                state="ok",
                last_rebuild=_rebuild_note(reason, through_day, covered, complete - covered),
                **_expected_meta(),
            )
            con.execute("checkpoint")
        finally:
            con.close()
    except BaseException:
        _remove_building(warehouse_path)
        raise
    _swap_in(tmp, warehouse_path)
    log.info(
        "warehouse %s rebuilt (%s): %d runs, %d of them (days through %s) from the lake's "
        "derived tables, the rest in %d batches (load %.1f s, models %.1f s); dbt %s",
        warehouse_path,
        reason,
        len(complete),
        len(covered),
        through_day,
        len(batches),
        load_s,
        models_s,
        parse_mode,
    )
    return UpdateResult(
        warehouse_path,
        "full",
        reason,
        len(complete),
        read,
        load_s,
        models_s,
        time.perf_counter() - start,
        nodes,
        parse_mode,
        len(batches),
        len(covered),
    )


def _create_empty(
    tmp: Path, lake: Lake, survey: Survey, warehouse_path: Path
) -> tuple[list[tuple[str, str, float]], str]:
    """Make `tmp` a warehouse holding every relation, empty: a copy of the one kept for the
    same key (yardstick/storage/kept.py), else dbt's full build of an empty batch, then kept.
    Returns dbt's nodes and how it came by its parse (none and "kept" for a copy)."""
    con = _connect(tmp)
    try:
        con.execute(f"create table {META} (key varchar, value varchar)")
        con.execute(f"create table {LOADED} (env varchar, run_id varchar)")
        _load_batch(con, lake, survey, set())
        _write_unfinished(con, {})
        _detail_views(con, lake)
        template_key = plan.key(con, dbt.models_digest(), FULL_ARGS)
    finally:
        con.close()
    template = kept.template(template_key)
    if template is not None:
        pristine = tmp.with_name(tmp.name + ".pristine")
        os.replace(tmp, pristine)
        try:
            shutil.copyfile(template, tmp)
            con = _connect(tmp)
            try:
                _detail_views(con, lake)  # views over this lake, not the one it was made on
            finally:
                con.close()
            pristine.unlink()
            return [], "dbt not started (an empty warehouse of the same key copied)"
        except (OSError, duckdb.Error) as exc:
            log.warning("warehouse: the kept empty warehouse did not open (%s); dbt builds", exc)
            kept.forget_template(template_key)
            tmp.unlink(missing_ok=True)
            tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
            os.replace(pristine, tmp)
    # The final path's dbt state: the update after this rebuild reuses its parse.
    result = dbt.run(tmp, FULL_ARGS, state_for=warehouse_path)
    _checkpoint(tmp)
    kept.keep_template(tmp, template_key)
    return result.nodes, result.parse_mode


def _rebuild_note(
    reason: str, through_day: str, covered: set[tuple[str, str]], derived_runs: set
) -> str:
    """What a rebuild imported and what it derived again (JSON, yardstick.meta's
    last_rebuild: the report's index shows it)."""
    periods = sorted({delta.run_period(run) for _, run in derived_runs})
    return json.dumps(
        {
            "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "reason": reason,
            "imported_through": "" if through_day == derived.NO_DAY else through_day,
            "imported_runs": len(covered),
            "derived_runs": len(derived_runs),
            "derived_periods": periods,
        }
    )


def _import_derived(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    found: list[derived.Checkpoint],
    covered: set[tuple[str, str]],
    old_path: Path,
) -> float:
    """Fill the empty marts of a rebuild from the chain of checkpoints `found` (their runs,
    `covered`, become loaded), and take the old warehouse's recorded dbt plan (valid if its
    key still matches); the seconds it took."""
    start = time.perf_counter()
    con.execute("begin")
    rows = derived.load(con, lake, found)
    _append_loaded(con, covered)
    _set_meta(con, checkpoint_id=found[-1].checkpoint, checkpoint_day=found[-1].through_day)
    con.execute("commit")
    _adopt_plan(con, old_path)
    log.info(
        "warehouse: %d runs of days %s..%s imported from %d derived checkpoints (%d rows, %.1f s)",
        len(covered),
        found[0].after_day,
        found[-1].through_day,
        len(found),
        rows,
        time.perf_counter() - start,
    )
    return time.perf_counter() - start


def _adopt_plan(con: duckdb.DuckDBPyConnection, old_path: Path) -> None:
    """Copy the recorded dbt plan of the warehouse being replaced (if any, and readable):
    the rebuild's next batch replays it when its key matches, instead of starting dbt."""
    if not old_path.exists():
        return
    try:
        con.execute(f"attach {_quote(str(old_path))} as previous (read_only)")
    except duckdb.Error:
        return
    try:
        found = con.execute(
            "select value from previous.yardstick.meta where key = ?", [plan.KEY]
        ).fetchone()
        if found:
            con.execute("begin")
            con.execute(f"create or replace table {plan.PLAN} as from previous.{plan.PLAN}")
            con.execute(f"delete from {META} where key = ?", [plan.KEY])
            con.execute(f"insert into {META} values (?, ?)", [plan.KEY, found[0]])
            con.execute("commit")
    except duckdb.Error as exc:
        log.info("warehouse: the previous warehouse's dbt plan not taken (%s)", exc)
        with suppress(duckdb.Error):  # no transaction open: nothing to roll back
            con.execute("rollback")
    finally:
        con.execute("detach previous")


def build(lake: Lake, warehouse_path: str | Path) -> Path:
    """Rebuild the warehouse from the lake alone (every run), atomically."""
    return update(lake, warehouse_path, full=True).path
