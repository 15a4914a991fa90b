"""Migration of a lake in the tool's earlier format into Delta tables, once, with a check.

The earlier format: `lake/<table>/env=<env>/period=<YYYY-MM>/<run_id>.parquet` (landed) and
`compacted-g<N>.parquet` (compacted: its footer key `yardstick.replaces` names files that are
no longer current even if they still exist), older lakes also `date=<YYYY-MM-DD>/` folders.
Each table's current files are appended to its Delta table in one commit (streamed, file by
file), marked with the application transaction `yardstick-migrate`; then the rows of the
migrated runs in the Delta table are counted per environment and must equal the rows read;
only then are the old files deleted. Killed at any instant, a rerun finishes the job: before
the commit nothing changed, after it the transaction mark says the rows are in (they are
counted again, never appended twice), and the old files are deleted last."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from yardstick.storage import delta, lakefs
from yardstick.storage.lakefs import Lake
from yardstick.storage.lakelock import LAKE_BUSY, lake_lock
from yardstick.storage.schemas import TABLES, file_schema

APP_ID = "yardstick-migrate"
_RUN_FILE = re.compile(r"^(\d{8}T\d{6}Z-[0-9a-z]+)\.parquet$")
_COMPACTED = re.compile(r"^compacted-g(\d+)\.parquet$")


class MigrationError(RuntimeError):
    """Rows read from the old files and rows in the Delta table differ: nothing deleted."""


class NotMigrated(RuntimeError):
    """The lake holds files of the earlier format: readers would miss their rows."""


def refuse_unmigrated(lake: Lake) -> None:
    """Raise NotMigrated (one line saying what to run) if the lake needs migrating."""
    if needed(lake):
        raise NotMigrated(
            f"lake {lake} holds files of the earlier format: run `yardstick lake migrate` "
            "(or `yardstick compact`, which migrates first)"
        )


@dataclass
class MigrationReport:
    """What a migration did, per table."""

    tables: dict[str, dict[str, int]] = field(default_factory=dict)  # table -> env -> rows
    files_removed: int = 0
    wall_s: float = 0.0

    def summary(self) -> str:
        """One line for logs."""
        rows = sum(n for envs in self.tables.values() for n in envs.values())
        return (
            f"migrated {len(self.tables)} tables ({rows} rows, every table and environment "
            f"counted) to Delta Lake in {self.wall_s:.1f} s; removed {self.files_removed} "
            "files of the earlier format"
        )


@dataclass(frozen=True)
class _OldFile:
    table: str
    env: str
    period: str
    path: str
    compacted: bool
    generation: int = 0


def _old_files(lake: Lake, table: str) -> list[_OldFile]:
    """Every file of the earlier format in one table's folder (current or replaced): one walk
    of the folder locally, one paginated listing of its prefix on S3."""
    root = lake.path(table)
    if lake.remote:
        with lakefs.storage_errors("listing", root):
            keys = lakefs.filesystem().find(root)
        key = root.removeprefix("s3://")
        parts = [k[len(key) + 1 :].split("/") for k in keys if k.startswith(key + "/")]
    else:
        parts = []
        for folder, dirs, names in os.walk(root):
            if "_delta_log" in dirs:
                dirs.remove("_delta_log")  # the Delta table's own log, never old files
            rel = Path(folder).relative_to(root).parts
            parts += [[*rel, name] for name in names]
    found = []
    for part in parts:
        if len(part) != 3 or not part[0].startswith("env="):
            continue
        env_folder, folder, name = part
        if folder.startswith("period="):
            period = folder.removeprefix("period=")
        elif folder.startswith("date="):
            period = folder.removeprefix("date=")[:7]
        else:
            continue
        env, path = env_folder.removeprefix("env="), lakefs.join(root, env_folder, folder, name)
        if _RUN_FILE.match(name):
            found.append(_OldFile(table, env, period, path, False))
        elif match := _COMPACTED.match(name):
            found.append(_OldFile(table, env, period, path, True, int(match.group(1))))
    return found


def _current(files: list[_OldFile]) -> list[_OldFile]:
    """The earlier format's rule: a file named in a compacted file's footer is not current."""
    replaced: set[str] = set()
    for f in files:
        if f.compacted:
            meta = lakefs.read_schema(f.path).metadata or {}
            table_root = lakefs.parent(lakefs.parent(lakefs.parent(f.path)))
            for name in json.loads(meta.get(b"yardstick.replaces", b"[]")):
                replaced.add(lakefs.join(table_root, name))
    return [f for f in files if f.path not in replaced]


def needed(lake: Lake) -> bool:
    """Whether the lake holds files of the earlier format."""
    return any(_old_files(lake, t) for t in _table_folders(lake))


def _table_folders(lake: Lake) -> list[str]:
    names = set(lakefs.list_names(lake.uri))
    return [t for t in TABLES if t in names]


def migrate(lake: Lake, locked: bool = False) -> MigrationReport:
    """Convert every table holding files of the earlier format (see the module's docstring)."""
    if not locked:
        with lake_lock(lake, doing="migrating it") as held:
            if not held:
                raise RuntimeError(f"lake {lake}: not migrated: {LAKE_BUSY}")
            return migrate(lake, locked=True)
    start = time.perf_counter()
    report = MigrationReport()
    for table in _table_folders(lake):
        every = _old_files(lake, table)
        if not every:
            continue
        current = _current(every)
        report.tables[table] = _migrate_table(lake, table, current)
        lakefs.delete_many([f.path for f in every])
        report.files_removed += len(every)
        if not lake.remote:
            _remove_empty_folders(lake.folder / table)
    manifest = lake.path("_manifest.json")
    if lakefs.exists(manifest):
        lakefs.delete(manifest)
        report.files_removed += 1
    report.wall_s = time.perf_counter() - start
    return report


def _migrate_table(lake: Lake, table: str, files: list[_OldFile]) -> dict[str, int]:
    """Append the current old files' rows in one commit (unless an earlier migration's commit
    is there), then check the rows per environment; return them."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    schema = pa.schema([*file_schema(table), ("env", pa.string()), ("period", pa.string())])
    read: dict[str, int] = {}
    runs: dict[str, set[str]] = {}

    def batches():
        for f in files:
            data = lakefs.read_table(f.path)
            data = data.append_column("env", pa.array([f.env] * data.num_rows, pa.string()))
            # Legacy day folders move to their month, as delta.run_period places new rows.
            periods = [delta.run_period(r) for r in data["run_id"].to_pylist()]
            data = data.append_column("period", pa.array(periods, pa.string()))
            data = delta._conform(data, schema)
            read[f.env] = read.get(f.env, 0) + data.num_rows
            runs.setdefault(f.env, set()).update(data["run_id"].to_pylist())
            yield from data.to_batches()

    dt = lake.table(table)
    done = dt is not None and (dt.transaction_version(APP_ID) or 0) >= 1
    if done:
        for _ in batches():  # count what the old files hold, append nothing
            pass
    else:
        if not lake.remote:
            (lake.folder / table).mkdir(parents=True, exist_ok=True)
        with lakefs.storage_errors("migration commit", lake.path(table)):
            write_deltalake(
                lake.path(table),
                pa.RecordBatchReader.from_batches(schema, batches()),
                mode="append",
                partition_by=delta.PARTITION_BY,
                schema_mode="merge",
                configuration=delta.TABLE_CONFIG,
                storage_options=lake.storage_options,
                commit_properties=CommitProperties(
                    custom_metadata={"yardstick.landing": "migration"},
                    app_transactions=[Transaction(APP_ID, 1)],
                ),
            )
    landed = delta.read(lake, table, columns=["env", "run_id"])
    counted: dict[str, int] = {}
    for env, run in zip(landed["env"].to_pylist(), landed["run_id"].to_pylist(), strict=True):
        if run in runs.get(env, ()):
            counted[env] = counted.get(env, 0) + 1
    for env in sorted(set(read) | set(counted)):
        if read.get(env, 0) != counted.get(env, 0):
            raise MigrationError(
                f"{table} env={env}: {read.get(env, 0)} rows in the old files, "
                f"{counted.get(env, 0)} in the Delta table: the old files are kept"
            )
    return read


def _remove_empty_folders(folder: Path) -> None:
    """Remove partition folders the migration emptied (old day folders above all)."""
    for dirpath, _dirs, _files in sorted(os.walk(folder), reverse=True):
        path = Path(dirpath)
        if path != folder and "_delta_log" not in path.parts:
            try:
                path.rmdir()
            except OSError:
                pass  # holds Delta data files
