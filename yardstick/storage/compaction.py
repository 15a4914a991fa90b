"""Compaction: Delta's optimize on the lake's tables, then vacuum, checkpoint and log clean-up.

A collection every 5 minutes lands a commit per table; a nightly run ~30. Compaction merges
the small files of each partition (environment and month) holding at least `min_files` of
them into one (`optimize.compact`, one commit per table: the files it replaced leave the
table's version in the same commit its output enters it), then deletes files removed more
than an hour ago (`vacuum`, the tables' `delta.deletedFileRetentionDuration`: readers that
listed them just before still find them), writes a log checkpoint and deletes log entries
past the tables' log retention (`_delta_log` stays small). A compaction killed at any instant
loses and doubles nothing: before its commit the table's version is unchanged (its new files
are orphans no reader sees, which a later vacuum deletes), after it the new version holds the
same rows. A landing during a compaction commits beside it (Delta's conflict check: an append
never conflicts with an optimize of files it did not touch). Per-run detail tables
(keyspace_keys, ping_histogram) are not merged: retention deletes their rows after a number
of days (yardstick/storage/retention.py).

A lake written in the earlier format of the tool is migrated first (storage/migrate.py)."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from deltalake.exceptions import CommitFailedError

from yardstick.storage import lake, lakefs
from yardstick.storage.lakefs import ObjectPath
from yardstick.storage.schemas import DETAIL_TABLES, TABLES


@dataclass
class CompactionReport:
    """What one compaction did."""

    partitions: int = 0  # partitions rewritten
    files_in: int = 0
    files_out: int = 0
    rows: int = 0
    files_vacuumed: int = 0  # removed files (and orphans) deleted
    migrated: str | None = None  # a lake of the earlier format converted first
    # Tables left to another machine's compaction that committed there first (S3 lakes:
    # the lake lock is per machine).
    conceded: list[str] = field(default_factory=list)
    skipped: str | None = None  # why nothing ran (another compaction holds the lock)
    wall_s: float = 0.0
    # Kept for callers that log them: a Delta commit leaves no leftovers to remove.
    leftovers_removed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for logs."""
        if self.skipped:
            return f"compaction skipped: {self.skipped}"
        text = (
            f"compacted {self.files_in} files into {self.files_out} "
            f"({self.partitions} partitions, {self.rows} rows) in {self.wall_s:.1f} s"
        )
        if self.files_vacuumed:
            text += f"; vacuum deleted {self.files_vacuumed} files no version needs"
        if self.conceded:
            text += (
                f"; left {len(self.conceded)} tables to another machine's compaction that "
                "committed there first"
            )
        if self.migrated:
            text = f"{self.migrated}; {text}"
        return text


# Why a compaction or retention pass did nothing: the lock is held by another run's
# compaction, its retention pass, or its warehouse update reading the lake (shared).
LAKE_BUSY = "another run holds the lake's lock (compacting it, or updating a warehouse from it)"


@contextmanager
def lake_lock(lake_dir: str | Path | ObjectPath) -> Iterator[bool]:
    """Hold the lake's compaction lock if free (yield True), else yield False.

    Appends need no lock (Delta's commits). The lock keeps a compaction's vacuum (and
    retention's) from deleting files a warehouse update on this machine is reading, and two
    optimizes (or an optimize and a delete) apart: delta-rs would commit both (lakefs.lease).
    flock dies with its process, so a compaction killed with -9 never blocks the next one. An
    S3 lake's lock is a file on this machine named after the lake's URL (lakefs.lock_file),
    plus the lake-wide lease object for the other machines (expiring after an hour)."""
    root = lakefs.lake_root(lake_dir)
    path = lakefs.lock_file(root)
    handle = open(path, "a+")  # noqa: SIM115 - held for the block
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        if not isinstance(root, ObjectPath):
            yield True
            return
        with lakefs.lease(root, f"{socket.gethostname()}:{os.getpid()}") as leased:
            yield leased
    finally:
        handle.close()


def compact(
    lake_dir: str | Path,
    min_files: int = 2,
    tables: list[str] | None = None,
    envs: list[str] | None = None,
    vacuum_hours: int | None = None,
) -> CompactionReport:
    """Optimize every table's partitions holding at least `min_files` data files (of `envs`
    when given); idempotent, crash-safe, safe beside concurrent landings. `vacuum_hours`
    overrides the tables' one-hour retention of removed files (0: delete them now)."""
    from yardstick.storage import migrate

    start = time.perf_counter()
    report = CompactionReport()
    with lake_lock(lake_dir) as held:
        if not held:
            report.skipped = LAKE_BUSY
            return report
        if migrate.needed(lake_dir):
            report.migrated = migrate.migrate(lake_dir, locked=True).summary()
        for table in tables or list(TABLES):
            if table in DETAIL_TABLES:
                continue
            _compact_table(lake_dir, table, min_files, envs, vacuum_hours, report)
    report.wall_s = time.perf_counter() - start
    return report


def _compact_table(
    lake_dir: str | Path,
    table: str,
    min_files: int,
    envs: list[str] | None,
    vacuum_hours: int | None,
    report: CompactionReport,
) -> None:
    """One table: optimize its crowded partitions in one commit, then vacuum and checkpoint."""
    dt = lake.open_table(lake_dir, table)
    if dt is None:
        return
    counts: dict[tuple[str, str], int] = {}
    for f in lake.data_files(lake_dir, table, envs, dt=dt):
        counts[(f.env, f.period)] = counts.get((f.env, f.period), 0) + 1
    crowded = sorted(key for key, n in counts.items() if n >= max(2, min_files))
    root = lake.table_root(lake_dir, table)
    if crowded:
        chosen_envs = sorted({env for env, _ in crowded})
        chosen_periods = sorted({period for _, period in crowded})
        try:
            with lakefs.storage_errors("optimize", root):
                metrics = dt.optimize.compact(
                    partition_filters=[
                        ("env", "in", chosen_envs),
                        ("period", "in", chosen_periods),
                    ]
                )
        except CommitFailedError:
            # Another machine's compaction committed over the same files first (Delta's
            # conflict check refuses the second): its version holds the rows, once.
            report.conceded.append(table)
            return
        report.partitions += metrics.get("partitionsOptimized", 0)
        report.files_in += metrics.get("numFilesRemoved", 0)
        report.files_out += metrics.get("numFilesAdded", 0)
        report.rows += sum(
            f.rows
            for f in lake.data_files(lake_dir, table, chosen_envs, dt=dt)
            if (f.env, f.period) in set(crowded)
        )
    if not crowded and envs is not None:
        return  # a collection's pass: the nightly one vacuums the whole table
    with lakefs.storage_errors("vacuum", root):
        # The nightly pass (every environment) also deletes orphans: data files older than
        # the retention that no commit names (a writer killed before its commit).
        deleted = dt.vacuum(
            retention_hours=vacuum_hours,
            dry_run=False,
            enforce_retention_duration=vacuum_hours is None,
            full=envs is None,
        )
        report.files_vacuumed += len(deleted)
        if crowded or deleted:
            # A checkpoint now: readers (the next collection's cursors) replay less JSON, and
            # log entries past the retention can go.
            dt.create_checkpoint()
            dt.cleanup_metadata()
