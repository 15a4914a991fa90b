"""The warehouse: a DuckDB file the dbt project in sql/ builds from the lake.

An update loads into raw_<table> only the rows of runs not loaded before (complete runs: those
whose `runs` row has landed), lists them in batch_runs, and lets dbt append them to the marts.
A full rebuild (first build, `full=True`, models or schema changed, an earlier update that did
not finish, a run arriving older than what is loaded) builds a new file from every current
lake file and swaps it in atomically."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from yardstick import dbt, lake
from yardstick.schemas import SCHEMA_VERSION, TABLES, file_schema

log = logging.getLogger(__name__)

META = "_yardstick_meta"  # key/value: models digest, schema version, update state
LOADED = "_yardstick_runs"  # one row per (env, run) the marts hold
FOOTERS = "_yardstick_footers"  # compacted files' footers, read once


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


def _quote(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The warehouse's meta table as a dict (empty when it has none)."""
    try:
        return dict(con.execute(f"select key, value from {META}").fetchall())
    except duckdb.CatalogException:
        return {}


def _set_meta(con: duckdb.DuckDBPyConnection, **values: str) -> None:
    """Upsert meta keys."""
    for key, value in values.items():
        con.execute(f"delete from {META} where key = ?", [key])
        con.execute(f"insert into {META} values (?, ?)", [key, value])


def _expected_meta() -> dict[str, str]:
    """What the meta must say for an incremental update to be allowed."""
    return {"models_digest": dbt.models_digest(), "schema_version": str(SCHEMA_VERSION)}


def _footer_cache(
    con: duckdb.DuckDBPyConnection,
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Compacted files' footers already read, by path."""
    try:
        rows = con.execute(f"select path, runs, replaces from {FOOTERS}").fetchall()
    except duckdb.CatalogException:
        return {}
    return {path: (tuple(runs), tuple(replaces)) for path, runs, replaces in rows}


def _save_footers(con: duckdb.DuckDBPyConnection, files: list[lake.LakeFile]) -> None:
    """Remember compacted files' footers (only files still in the lake)."""
    con.execute(
        f"create or replace table {FOOTERS} (path varchar, runs varchar[], replaces varchar[])"
    )
    rows = [(str(f.path), list(f.runs), list(f.replaces)) for f in files if f.kind == "compacted"]
    if rows:
        con.executemany(f"insert into {FOOTERS} values (?, ?, ?)", rows)


def _complete_runs(files: list[lake.LakeFile]) -> dict[tuple[str, str], list[lake.LakeFile]]:
    """(env, run_id) of every run whose `runs` row has landed, with the files holding it."""
    complete: dict[tuple[str, str], list[lake.LakeFile]] = {}
    for f in files:
        if f.table == "runs":
            for run_id in f.runs:
                complete.setdefault((f.env, run_id), []).append(f)
    return complete


def _load_batch(
    con: duckdb.DuckDBPyConnection,
    files: list[lake.LakeFile],
    batch: set[tuple[str, str]],
    reloaded: bool = False,
) -> int:
    """Create raw_<table> with the rows of the batch's runs and batch_runs; return files read."""
    con.execute(
        "create or replace table batch_runs (env varchar, run_id varchar, reloaded boolean)"
    )
    rows = sorted(batch)
    if rows:
        con.executemany(
            "insert into batch_runs values (?, ?, ?)", [(e, r, reloaded) for e, r in rows]
        )
    by_table: dict[str, list[lake.LakeFile]] = {}
    for f in files:
        if any((f.env, run_id) in batch for run_id in f.runs):
            by_table.setdefault(f.table, []).append(f)
    read = 0
    for table in TABLES:
        empty = file_schema(table).empty_table()  # noqa: F841 - read by DuckDB's replacement scan
        con.execute(
            f"create or replace table raw_{table} as "
            f"select *, null::varchar as env, null::date as date from empty"
        )
        chosen = by_table.get(table, [])
        if not chosen:
            continue
        read += len(chosen)
        paths = pa.table(
            {"filename": [str(f.path) for f in chosen], "file_env": [f.env for f in chosen]}
        )  # noqa: F841
        con.register("lake_paths", paths)
        listing = "[" + ", ".join(_quote(str(f.path)) for f in chosen) + "]"
        # Files written under an older schema lack newer columns: by-name insert leaves them null.
        # The run filter matters for compacted files, which hold runs already loaded.
        con.execute(
            f"insert into raw_{table} by name "
            f"select t.* exclude (filename), p.file_env as env, "
            f"strptime(left(t.run_id, 8), '%Y%m%d')::date as date "
            f"from read_parquet({listing}, filename = true, union_by_name = true, "
            f"hive_partitioning = false) as t "
            f"join lake_paths as p on p.filename = t.filename "
            f"semi join batch_runs as b on b.env = p.file_env and b.run_id = t.run_id"
        )
        con.unregister("lake_paths")
    return read


def _connect(path: Path) -> duckdb.DuckDBPyConnection:
    """Open the warehouse for writing (the loader's part of an update)."""
    return duckdb.connect(str(path))


def update(
    lake_dir: str | Path,
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
    lake_dir, warehouse_path = Path(lake_dir), Path(warehouse_path)
    warehouse_path.parent.mkdir(parents=True, exist_ok=True)
    with dbt.locked(warehouse_path):
        return _update(lake_dir, warehouse_path, full, until_run_id)


def _wanted(complete: set[tuple[str, str]], until_run_id: str | None) -> set[tuple[str, str]]:
    """The complete runs an update may load (those started no later than `until_run_id`)."""
    if until_run_id is None:
        return complete
    return {(env, run) for env, run in complete if run <= until_run_id}


def _update(
    lake_dir: Path, warehouse_path: Path, full: bool, until_run_id: str | None
) -> UpdateResult:
    """update() under the warehouse's lock."""
    start = time.perf_counter()
    reason = "asked for a full rebuild" if full else ""
    if not full and not warehouse_path.exists():
        reason = "no warehouse yet"
    footers: dict = {}
    loaded: set[tuple[str, str]] = set()
    if not reason:
        try:
            con = duckdb.connect(str(warehouse_path), read_only=True)
        except duckdb.Error as exc:
            reason = f"the warehouse could not be opened ({str(exc).splitlines()[0]})"
        else:
            try:
                meta = _meta(con)
                expected = _expected_meta()
                if meta.get("state") != "ok":
                    reason = "the previous update did not finish"
                elif meta.get("models_digest") != expected["models_digest"]:
                    reason = "the SQL models changed"
                elif meta.get("schema_version") != expected["schema_version"]:
                    reason = "the lake schema changed"
                else:
                    footers = _footer_cache(con)
                    loaded = set(con.execute(f"select env, run_id from {LOADED}").fetchall())
                    latest = dict(
                        con.execute(
                            f"select env, max(run_id) from {LOADED} group by env"
                        ).fetchall()
                    )
            finally:
                con.close()
    if reason:
        return _rebuild(lake_dir, warehouse_path, reason, start, until_run_id)

    files = lake.current(lake.scan(lake_dir, footers=footers))
    complete = _complete_runs(files)
    batch = _wanted(set(complete), until_run_id) - loaded
    if not batch:
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
        return _rebuild(lake_dir, warehouse_path, why, start, until_run_id)

    load_start = time.perf_counter()
    con = _connect(warehouse_path)
    try:
        _set_meta(con, state="updating")
        read = _load_batch(con, files, batch)
        _save_footers(con, files)
    finally:
        con.close()
    load_s = time.perf_counter() - load_start
    models_start = time.perf_counter()
    # Views and seeds exist since the last full build; only tables and marts take the batch.
    result = dbt.run(warehouse_path, ["run", "--exclude", "config.materialized:view"])
    models_s = time.perf_counter() - models_start
    con = _connect(warehouse_path)
    try:
        con.executemany(f"insert into {LOADED} values (?, ?)", sorted(batch))
        _set_meta(con, state="ok")
        con.execute("checkpoint")
    finally:
        con.close()
    return UpdateResult(
        warehouse_path,
        "incremental",
        f"{len(batch)} new runs",
        len(batch),
        read,
        load_s,
        models_s,
        time.perf_counter() - start,
        result.nodes,
    )


def _rebuild(
    lake_dir: Path, warehouse_path: Path, reason: str, start: float, until_run_id: str | None
) -> UpdateResult:
    """Build a new warehouse from every current lake file and swap it into place."""
    # The same name every time (the caller holds the warehouse's lock), so dbt's parse of
    # the project for this file is reused; a file left by a killed rebuild is replaced.
    tmp = warehouse_path.with_name(f".{warehouse_path.name}.building")
    for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
        leftover.unlink(missing_ok=True)
    try:
        load_start = time.perf_counter()
        files = lake.current(lake.scan(lake_dir))
        complete = _wanted(set(_complete_runs(files)), until_run_id)
        con = _connect(tmp)
        try:
            con.execute(f"create table {META} (key varchar, value varchar)")
            con.execute(f"create table {LOADED} (env varchar, run_id varchar)")
            _set_meta(con, state="updating")
            read = _load_batch(con, files, complete)
            _save_footers(con, files)
        finally:
            con.close()
        load_s = time.perf_counter() - load_start
        models_start = time.perf_counter()
        result = dbt.run(
            tmp,
            ["build", "--full-refresh", "--resource-type", "seed", "--resource-type", "model"],
        )
        models_s = time.perf_counter() - models_start
        con = _connect(tmp)
        try:
            if complete:
                con.executemany(f"insert into {LOADED} values (?, ?)", sorted(complete))
            _set_meta(con, state="ok", **_expected_meta())
            con.execute("checkpoint")
        finally:
            con.close()
    except BaseException:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
        raise
    # A WAL beside the old file belongs to the old file: it must not meet the new one.
    warehouse_path.with_name(warehouse_path.name + ".wal").unlink(missing_ok=True)
    os.replace(tmp, warehouse_path)
    return UpdateResult(
        warehouse_path,
        "full",
        reason,
        len(complete),
        read,
        load_s,
        models_s,
        time.perf_counter() - start,
        result.nodes,
    )


def build(lake_dir: str | Path, warehouse_path: str | Path) -> Path:
    """Rebuild the warehouse from the lake alone (every run), atomically."""
    return update(lake_dir, warehouse_path, full=True).path


def connect_read_only(warehouse_path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open the warehouse for queries; only updates ever open it for writing."""
    path = Path(warehouse_path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no warehouse yet (run `yardstick run` or `yardstick report`)"
        )
    return duckdb.connect(str(path), read_only=True)
