"""Compaction: many small files of one table, environment and period become one.

A collection every 5 minutes lands ~6 files per environment; a nightly run ~30. Compaction
merges a partition's current files (landed ones and the previous compacted file) into a new
compacted file `compacted-g<N>.parquet` whose footer lists the runs it holds and the files it
replaces, then deletes those files. The footer is the commit: once the new file exists under
its final name, the files it names are no longer current (lake.current), whether or not the
deletion that follows happened. So a compaction killed at any instant loses no row (inputs
are deleted only after the commit) and doubles none (readers skip what a committed file
replaces); the next compaction deletes the leftovers. A file landed while a compaction runs is
not in its input list and stays current. Per-run detail tables (keyspace_keys, ping_histogram)
are not merged: retention drops them after a number of days (yardstick/storage/retention.py).

On an S3 lake (yardstick/storage/lakefs.py) the protocol is the same: the compacted object is one
conditional PUT (never overwriting a generation another compaction committed), the listing that
follows is strongly consistent, deletions are DeleteObject calls; instead of hidden temporary
files, unfinished multipart uploads (a landing or compaction killed while uploading) are
what is left to clean up."""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from yardstick.storage import lake, lakefs
from yardstick.storage.lakefs import LakePath, ObjectPath
from yardstick.storage.schemas import DETAIL_TABLES, file_schema

# Temporary files older than this were left by a process that died (landing takes seconds).
STALE_TMP_S = 3600.0
MANIFEST = "_manifest.json"
ROW_GROUP_ROWS = 65_536


@dataclass
class CompactionReport:
    """What one compaction did."""

    partitions: int = 0  # partitions rewritten
    files_in: int = 0
    files_out: int = 0
    rows: int = 0
    leftovers_removed: list[str] = field(default_factory=list)  # from an interrupted run
    # S3 lakes: partitions left alone because another machine's compaction committed there
    # meanwhile (the lake lock is per machine; see lake_lock).
    conceded: list[str] = field(default_factory=list)
    skipped: str | None = None  # why nothing ran (another compaction holds the lock)
    wall_s: float = 0.0

    def summary(self) -> str:
        """One line for logs."""
        if self.skipped:
            return f"compaction skipped: {self.skipped}"
        text = (
            f"compacted {self.files_in} files into {self.files_out} "
            f"({self.partitions} partitions, {self.rows} rows) in {self.wall_s:.1f} s"
        )
        if self.leftovers_removed:
            text += (
                f"; removed {len(self.leftovers_removed)} files an interrupted compaction or "
                "landing had left"
            )
        if self.conceded:
            text += (
                f"; left {len(self.conceded)} partitions to another machine's compaction that "
                "committed there meanwhile"
            )
        return text


# Why a compaction or retention pass did nothing: the lock is held by another run's
# compaction, its retention pass, or its warehouse update reading the lake (shared).
LAKE_BUSY = "another run holds the lake's lock (compacting it, or updating a warehouse from it)"


@contextmanager
def lake_lock(lake_dir: str | Path | ObjectPath) -> Iterator[bool]:
    """Hold the lake's compaction lock if free (yield True), else yield False.

    flock dies with its process, so a compaction killed with -9 never blocks the next one.
    A local lake holds its lock file (lake/.compaction.lock); S3 has no lock, so an S3 lake's
    lock is a file on this machine named after the lake's URL (lakefs.lock_file): it keeps
    apart the compactions and retention passes of one machine, not of two machines (the
    conditional PUT of each compacted file still refuses to overwrite another's commit)."""
    path = lakefs.lock_file(lakefs.lake_root(lake_dir))
    handle = open(path, "a+")  # noqa: SIM115 - held for the block
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        handle.close()


def compact(
    lake_dir: str | Path,
    min_files: int = 2,
    tables: list[str] | None = None,
    envs: list[str] | None = None,
    manifest: bool = True,
) -> CompactionReport:
    """Merge every partition holding at least `min_files` current files (any legacy
    `date=` file always moves); idempotent, crash-safe, safe beside concurrent landings.

    A partition of one file is left unopened: in a compacted lake that is nearly all of them,
    so a pass costs a directory listing plus the partitions that changed."""
    start = time.perf_counter()
    lake_dir = lakefs.lake_root(lake_dir)
    report = CompactionReport()
    with lake_lock(lake_dir) as held:
        if not held:
            report.skipped = LAKE_BUSY
            return report
        partitions: dict[tuple[str, str, str], list[lake.LakeFile]] = {}
        for f in lake.scan(lake_dir, tables, envs=envs, read_footers=False):
            if f.table not in DETAIL_TABLES:
                partitions.setdefault((f.table, f.env, f.period), []).append(f)
        for (table, env, period), members in sorted(partitions.items()):
            legacy = any(f.path.parent.name.startswith("date=") for f in members)
            if len(members) < 2 and not legacy:
                continue
            members = [f.with_footer() for f in members]
            report.leftovers_removed += _remove_replaced(lake_dir, members)
            # On S3 no HEAD per file: one that vanished fails the merge before its commit.
            members = [
                f
                for f in lake.current(members)
                if isinstance(f.path, ObjectPath) or f.path.exists()
            ]
            if len(members) < min_files and not legacy:
                continue
            try:
                report.rows += _merge(lake_dir, table, env, period, members)
            except _Conceded:
                report.conceded.append(f"{table}/env={env}/period={period}")
                continue
            report.partitions += 1
            report.files_in += len(members)
            report.files_out += 1
        report.leftovers_removed += _remove_stale_temporaries(lake_dir)
        if manifest:
            write_manifest(lake_dir)
    report.wall_s = time.perf_counter() - start
    return report


class _Conceded(Exception):
    """Another machine's compaction committed in this partition meanwhile (S3 lakes)."""


def _merge(
    lake_dir: LakePath, table: str, env: str, period: str, members: list[lake.LakeFile]
) -> int:
    """Write one compacted file for a partition, then delete its inputs; return its rows.

    On S3 the lake lock keeps apart one machine's compactions only. Two machines' are kept
    from committing over each other: the newest compacted file of a partition is always a
    member (nothing replaces it), so a generation in the folder above the members' means
    another compaction committed since the listing (this one concedes), and the conditional
    PUT refuses a generation the other one commits between that check and the upload."""
    schema = file_schema(table)
    remote = isinstance(lake_dir, ObjectPath)
    expected = 1 + max((f.generation for f in members if f.kind == "compacted"), default=0)
    folder = lake_dir / table / f"env={env}" / f"period={period}"
    if remote and lake.next_generation(folder) != expected:
        raise _Conceded
    if remote:
        try:
            parts = [_conform(t, schema) for t in lakefs.read_tables([f.path for f in members])]
        except FileNotFoundError:  # an input the other compaction committed and deleted
            raise _Conceded from None
    else:
        parts = [_conform(_read(f.path), schema) for f in members]
    merged = pa.concat_tables(parts) if parts else schema.empty_table()
    # Sorted by run id (time order): readers filtering on run_id skip row groups by statistics.
    merged = merged.sort_by([("run_id", "ascending")])
    table_root = lake_dir / table
    runs = sorted({run for f in members for run in f.runs})
    replaces = sorted(str(f.path.relative_to(table_root)) for f in members)
    generation = expected if remote else max(expected, lake.next_generation(folder))
    final = folder / f"{lake.COMPACTED_PREFIX}{generation:06d}.parquet"
    data = lake.stamp(
        merged,
        table,
        {"yardstick.runs": json.dumps(runs), "yardstick.replaces": json.dumps(replaces)},
    )
    # Row groups of 64k rows: a reader after the newest runs (the warehouse update) skips the
    # month's older row groups by their run_id statistics.
    try:
        lake.write_atomic(data, final, f"{final} already exists", row_group_size=ROW_GROUP_ROWS)
    except lake.LakeConflict:
        if not remote:
            raise
        raise _Conceded from None
    # The commit happened: from here on the inputs are not current, deleted or not.
    _delete_inputs(members)
    return merged.num_rows


def _read(path: LakePath) -> pa.Table:
    """One lake file's rows."""
    return lakefs.read_table(path) if isinstance(path, ObjectPath) else pq.read_table(path)


def _delete_inputs(members: list[lake.LakeFile]) -> None:
    """Delete the files a committed compacted file replaces (and emptied legacy folders)."""
    lakefs.delete_many([f.path for f in members])
    _remove_empty_dirs(members)


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """A file's rows in the table's current schema (columns added since are null)."""
    columns = []
    for field_ in schema:
        if field_.name in data.column_names:
            columns.append(data[field_.name].cast(field_.type))
        else:
            columns.append(pa.nulls(data.num_rows, field_.type))
    return pa.table(columns, schema=schema)


def _remove_replaced(lake_dir: LakePath, members: list[lake.LakeFile]) -> list[str]:
    """Delete files of a partition that a committed compacted file replaced."""
    removed: list[str] = []
    present = {f.path for f in members}
    for f in members:
        if f.kind != "compacted":
            continue
        for name in f.replaces:
            path = lake_dir / f.table / name
            if path in present and path != f.path:
                lakefs.delete(path)
                removed.append(str(path.relative_to(lake_dir)))
    return removed


def _remove_stale_temporaries(lake_dir: LakePath) -> list[str]:
    """Delete temporary files (hidden, never read) that a dead process left an hour ago; on
    S3, abort multipart uploads a dead process left unfinished an hour ago."""
    if isinstance(lake_dir, ObjectPath):
        return lakefs.abort_stale_uploads(lake_dir, STALE_TMP_S)
    removed: list[str] = []
    now = time.time()
    for tmp in lake_dir.glob("*/env=*/*/.*.tmp-*"):
        try:
            if now - tmp.stat().st_mtime > STALE_TMP_S:
                tmp.unlink()
                removed.append(str(tmp.relative_to(lake_dir)))
        except FileNotFoundError:
            pass
    return removed


def _remove_empty_dirs(members: list[lake.LakeFile]) -> None:
    """Remove legacy day folders emptied by a merge."""
    for folder in {f.path.parent for f in members}:
        if isinstance(folder, Path) and folder.name.startswith("date="):
            try:
                folder.rmdir()
            except OSError:
                pass  # not empty: a file landed there meanwhile


def write_manifest(lake_dir: LakePath) -> LakePath:
    """Write lake/_manifest.json: the files a compaction leaves current, for readers without
    the tool (files landed afterwards are current too; see the rule inside)."""
    files = lake.scan(lake_dir, read_footers=False)
    entries = [
        {
            "table": f.table,
            "env": f.env,
            "period": f.period,
            "path": str(f.path.relative_to(lake_dir)),
            "kind": f.kind,
        }
        for f in sorted(files, key=lambda f: (f.table, f.env, f.period, f.path.name))
    ]
    manifest = {
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rule": (
            "current files: those listed here, plus any *.parquet landed later in a period "
            "folder, minus any file named in the footer key yardstick.replaces of a compacted "
            "file (paths relative to lake/<table>/)"
        ),
        "files": entries,
    }
    final = lake_dir / MANIFEST
    lakefs.put_text(final, json.dumps(manifest, indent=0))
    return final
