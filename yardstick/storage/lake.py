"""The lake: append-only Parquet files, one folder per table, environment and period.

    lake/<table>/env=<env>/period=<YYYY-MM>/<run_id>.parquet            landed by one run
    lake/<table>/env=<env>/period=<YYYY-MM>/compacted-g<NNNNNN>.parquet  compacted (many runs)

A landed file appears complete or not at all (temporary name, then link). Compaction
(yardstick/storage/compaction.py) merges a period's files into one compacted file whose footer names
the runs it holds and the files it replaces; a replaced file is no longer current even while
it still exists (a compaction that died before deleting it). `current_files` applies that rule;
lake/_manifest.json (written by compaction) lists the result for readers without the tool.
Files landed before periods existed (`date=<YYYY-MM-DD>/`) are read as landed files.

`lake_dir` is a local folder or `s3://bucket/prefix` (storage/lakefs.py: the storage layer,
credentials from the environment only); paths of an S3 lake are lakefs.ObjectPath."""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from yardstick.storage import lakefs
from yardstick.storage.lakefs import LakePath, ObjectPath
from yardstick.storage.schemas import SCHEMA_VERSION, TABLES, file_schema

COMPACTED_PREFIX = "compacted-g"
_RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-z]+$")


class LakeConflict(Exception):
    """A file for this table, environment and run already exists: the lake never overwrites."""


def new_run_id(now: datetime | None = None) -> str:
    """A sortable, unique run id such as 20261129T224501Z-3f9a1c."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def landed_run_id(name: str) -> str | None:
    """The run whose landed file is named `name` (`<run_id>.parquet`), else None."""
    stem = name.removesuffix(".parquet")
    return stem if name.endswith(".parquet") and _RUN_ID.match(stem) else None


def run_day(run_id: str) -> date:
    """The UTC day a run started, read from its id: every table of a run shares it."""
    return datetime.strptime(run_id[:8], "%Y%m%d").date()


def run_period(run_id: str) -> str:
    """The period (UTC month, YYYY-MM) a run's files land in."""
    return f"{run_id[:4]}-{run_id[4:6]}"


def file_path(lake_dir: LakePath, table: str, env: str, run_id: str) -> LakePath:
    """Where the file of `table` for one environment and run lands."""
    return lake_dir / table / f"env={env}" / f"period={run_period(run_id)}" / f"{run_id}.parquet"


def stamp(data: pa.Table, table: str, metadata: dict[str, str] | None = None) -> pa.Table:
    """Attach the lake's schema metadata (and any extra keys) to a table about to be written."""
    return data.replace_schema_metadata(
        {
            "yardstick.schema_version": str(SCHEMA_VERSION),
            "yardstick.table": table,
            **(metadata or {}),
        }
    )


def write_atomic(
    data: pa.Table, final: LakePath, conflict: str, row_group_size: int | None = None
) -> LakePath:
    """Write `data` to a temporary name, then link it to `final` (never overwriting); on S3,
    one conditional upload of the whole file (lakefs.put_parquet)."""
    if isinstance(final, ObjectPath):
        try:
            lakefs.put_parquet(data, final, row_group_size)
        except FileExistsError:
            raise LakeConflict(conflict) from None
        return final
    if final.exists():
        raise LakeConflict(conflict)
    final.parent.mkdir(parents=True, exist_ok=True)
    # The temporary name does not end in .parquet, so readers never glob a half file.
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(2)}")
    try:
        pq.write_table(data, tmp, compression="zstd", row_group_size=row_group_size)
        # link() fails if the target appeared meanwhile, unlike rename(): no overwrite.
        os.link(tmp, final)
    except FileExistsError:
        raise LakeConflict(conflict) from None
    finally:
        tmp.unlink(missing_ok=True)
    return final


def write(
    lake_dir: str | Path, table: str, env: str, run_id: str, data: pa.Table
) -> LakePath | None:
    """Land one table atomically; a table without rows lands no file (steps say what ran)."""
    schema = file_schema(table)
    # The lake adds these two; the task provides every other declared column, by name.
    declared = pa.schema([f for f in schema if f.name not in ("run_id", "schema_version")])
    unknown = sorted(set(data.column_names) - set(declared.names))
    missing = sorted(set(declared.names) - set(data.column_names))
    if unknown or missing:
        raise ValueError(f"table {table!r}: unknown columns {unknown}, missing columns {missing}")
    n = data.num_rows
    if n == 0:
        return None
    data = data.select(declared.names).cast(declared)
    data = data.add_column(0, "schema_version", pa.array([SCHEMA_VERSION] * n, pa.int16()))
    data = data.add_column(0, "run_id", pa.array([run_id] * n, pa.string()))
    data = stamp(data.select(schema.names), table)
    final = file_path(lakefs.lake_root(lake_dir), table, env, run_id)
    return write_atomic(
        data, final, f"{final} already exists; the lake never overwrites a run's data"
    )


@dataclass(frozen=True)
class LakeFile:
    """One Parquet file of the lake and what it holds."""

    table: str
    env: str
    period: str  # YYYY-MM (legacy day folders map to their month)
    path: LakePath  # a Path, or an ObjectPath (str() is its s3:// URL) in an S3 lake
    kind: str  # landed | compacted
    runs: tuple[str, ...]  # run ids whose rows the file holds
    replaces: tuple[str, ...] = ()  # paths (relative to lake/<table>/) a compacted file replaces
    generation: int = 0
    footer_read: bool = True  # False: a compacted file listed without reading its footer

    def with_footer(self) -> LakeFile:
        """This file with its footer's runs and replaced files read (compacted files)."""
        if self.footer_read:
            return self
        runs, replaces = read_footer(self.path)
        return replace(self, runs=runs, replaces=replaces, footer_read=True)


def read_footer(path: LakePath) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(runs, replaced file names) recorded in a compacted file's footer."""
    schema = lakefs.read_schema(path) if isinstance(path, ObjectPath) else pq.read_schema(path)
    meta = schema.metadata or {}
    runs = json.loads(meta.get(b"yardstick.runs", b"[]"))
    replaces = json.loads(meta.get(b"yardstick.replaces", b"[]"))
    return tuple(runs), tuple(replaces)


def scan(
    lake_dir: str | Path,
    tables: list[str] | None = None,
    envs: list[str] | None = None,
    read_footers: bool = True,
) -> list[LakeFile]:
    """Every Parquet file in the lake (current or replaced); `read_footers=False` lists
    compacted files without opening them (see LakeFile.with_footer)."""
    root = lakefs.lake_root(lake_dir)
    found: list[LakeFile] = []
    for table, env_folder, part_folder, name, path in _entries(root, tables, envs):
        if not name.endswith(".parquet") or name.startswith("."):
            continue
        env, period = env_folder.removeprefix("env="), _period_of(part_folder)
        if name.startswith(COMPACTED_PREFIX):
            generation = int(name.removeprefix(COMPACTED_PREFIX).split(".")[0])
            listed = LakeFile(
                table, env, period, path, "compacted", (), (), generation, footer_read=False
            )
            found.append(listed.with_footer() if read_footers else listed)
        elif _RUN_ID.match(name.removesuffix(".parquet")):
            found.append(
                LakeFile(table, env, period, path, "landed", (name.removesuffix(".parquet"),))
            )
    return found


def _entries(
    root: LakePath, tables: list[str] | None, envs: list[str] | None
) -> Iterator[tuple[str, str, str, str, LakePath]]:
    """(table, env folder, partition folder, file name, path) of the files in the partition
    folders of `tables` (every table when None): os.scandir locally, listings of prefixes on
    S3 (see lakefs.list_files)."""
    if isinstance(root, ObjectPath):
        order = {table: i for i, table in enumerate(tables or TABLES)}
        listed = [
            parts
            for parts in lakefs.list_files(root, tables, envs)
            if len(parts) == 4 and parts[0] in order and parts[1].startswith("env=")
        ]
        for parts in sorted(listed, key=lambda p: (order[p[0]], p)):
            if _wanted(parts[1], parts[2], envs):
                yield (*parts, root.joinpath(*parts))
        return
    for table in tables or list(TABLES):
        folder = root / table
        if not folder.is_dir():
            continue
        for env_dir in _subdirs(folder, "env="):
            if not _wanted(env_dir.name, None, envs):
                continue
            for part in _subdirs(env_dir, ""):
                if not _wanted(env_dir.name, part.name, envs):
                    continue
                for entry in os.scandir(part):
                    yield table, env_dir.name, part.name, entry.name, Path(entry.path)


def _wanted(env_folder: str, part_folder: str | None, envs: list[str] | None) -> bool:
    """A folder of an environment asked for, and (when given) a partition folder."""
    if envs is not None and env_folder.removeprefix("env=") not in envs:
        return False
    return part_folder is None or _period_of(part_folder) is not None


def current(files: list[LakeFile]) -> list[LakeFile]:
    """The files readers should read: every file but those a compacted file replaces (the
    compacted files' footers must have been read)."""
    replaced = {
        (f.path.parents[2] / name) for f in files if f.kind == "compacted" for name in f.replaces
    }
    return [f for f in files if f.path not in replaced]


def current_files(lake_dir: str | Path, tables: list[str] | None = None) -> list[LakeFile]:
    """The lake's current files (see `current`)."""
    return current(scan(lake_dir, tables))


def next_generation(folder: LakePath) -> int:
    """One above the highest compacted generation in `folder` (replaced files included)."""
    gens = [
        int(name.removeprefix(COMPACTED_PREFIX).split(".")[0])
        for name in lakefs.list_names(folder)
        if name.startswith(COMPACTED_PREFIX) and name.endswith(".parquet")
    ]
    return max(gens, default=0) + 1


def _subdirs(folder: Path, prefix: str) -> list[Path]:
    """Sub-folders of `folder` whose name starts with `prefix`, sorted."""
    return sorted(
        Path(e.path) for e in os.scandir(folder) if e.is_dir() and e.name.startswith(prefix)
    )


def _period_of(folder_name: str) -> str | None:
    """The period a partition folder holds: `period=YYYY-MM`, or a legacy `date=YYYY-MM-DD`."""
    if folder_name.startswith("period="):
        return folder_name.removeprefix("period=")
    if folder_name.startswith("date="):
        return folder_name.removeprefix("date=")[:7]
    return None
