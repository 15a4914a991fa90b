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

A collection's pass (`small_bytes`) merges only small files, so the month's file is not
rewritten every few minutes, and then sweeps: the files a pass replaced are deleted once no
version of the last READER_MARGIN_S names them (vacuum keeping those versions), so the
lake's file count stays bounded at every moment (docs/lake-warehouse.md, bench/lake_files.py).

A lake written in the earlier format of the tool is migrated first (storage/migrate.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from deltalake.exceptions import CommitFailedError

from yardstick.storage import delta, derived, lakefs, migrate
from yardstick.storage.lakefs import Lake
from yardstick.storage.lakelock import LAKE_BUSY, lake_lock
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


# A collection's pass merges only files below this size (delta-rs' bin-packing skips larger
# ones): the new rows and the day's merged file, never the month's big file, so its cost
# follows the rows landed since the last pass. The nightly pass merges everything (the
# tables' 100 MB target).
SMALL_FILE_BYTES = 4 << 20
# A reader whose snapshot is at most this old finds every file it lists: a collection's
# pass deletes the files replaced before it (vacuum keeping every version of the margin).
# The warehouse updates of this machine hold the lake's lock and never meet a deletion.
READER_MARGIN_S = 10 * 60
# A collection's pass checkpoints a table whose log grew by this many commits since its last
# checkpoint, then deletes log entries past the tables' log retention.
CHECKPOINT_AFTER_COMMITS = 10
# A collection's pass sweeps every table (not only those it merged) within the first minutes
# of each hour: one collection round of the 5-minute schedule.
SWEEP_ALL_WITHIN_MIN = 5


def compact(
    lake: Lake,
    min_files: int = 2,
    tables: list[str] | None = None,
    envs: list[str] | None = None,
    vacuum_hours: int | None = None,
    small_bytes: int | None = None,
    reader_margin_s: float = READER_MARGIN_S,
) -> CompactionReport:
    """Optimize every table's partitions holding at least `min_files` data files (of `envs`
    when given); idempotent, crash-safe, safe beside concurrent landings. `vacuum_hours`
    overrides the tables' one-hour retention of removed files (0: delete them now).

    With `small_bytes` (a collection's pass): a partition is crowded once `min_files`
    single-run files (landings) wait in it, only files below `small_bytes` are merged, and
    the merged tables (every table at the first pass of an hour, and at the nightly pass)
    are swept: replaced files no version of the last `reader_margin_s` names are deleted,
    the log checkpointed and trimmed."""
    start = time.perf_counter()
    report = CompactionReport()
    with lake_lock(lake) as held:
        if not held:
            report.skipped = LAKE_BUSY
            return report
        merged: list[str] = []
        if migrate.needed(lake):
            report.migrated = migrate.migrate(lake, locked=True).summary()
        for table in tables or list(TABLES):
            if table in DETAIL_TABLES:
                continue
            if _compact_table(lake, table, min_files, envs, vacuum_hours, small_bytes, report):
                merged.append(table)
        if vacuum_hours is None and (small_bytes is not None or envs is None):
            # What a pass replaced goes once the margin has passed: the tables a collection's
            # pass merged at each pass, every table (the nightly pass's files too) at the
            # nightly pass and at the first collection pass of each hour.
            hourly = envs is None or time.gmtime().tm_min < SWEEP_ALL_WITHIN_MIN
            for table in delta.tables_present(lake) if hourly else merged:
                _sweep_table(lake, table, reader_margin_s, report)
        if envs is None:
            # The nightly pass: the marts of closed days the warehouse keeps in the lake.
            files_in, files_out, deleted = derived.compact(lake, vacuum_hours)
            report.files_in += files_in
            report.files_out += files_out
            report.files_vacuumed += deleted
    report.wall_s = time.perf_counter() - start
    return report


def _compact_table(
    lake: Lake,
    table: str,
    min_files: int,
    envs: list[str] | None,
    vacuum_hours: int | None,
    small_bytes: int | None,
    report: CompactionReport,
) -> bool:
    """One table: optimize its crowded partitions in one commit, then vacuum and checkpoint;
    whether it merged files."""
    dt = lake.table(table)
    if dt is None:
        return False
    _configure(dt)
    counts: dict[tuple[str, str], int] = {}
    for f in delta.data_files(lake, table, envs, dt=dt):
        if small_bytes is not None and (f.size_bytes >= small_bytes or f.min_run != f.max_run):
            continue  # a collection's pass counts the landings waiting, not merged files
        counts[(f.env, f.period)] = counts.get((f.env, f.period), 0) + 1
    crowded = sorted(key for key, n in counts.items() if n >= max(2, min_files))
    root = lake.path(table)
    if crowded:
        chosen_envs = sorted({env for env, _ in crowded})
        chosen_periods = sorted({period for _, period in crowded})
        try:
            with lakefs.storage_errors("optimize", root):
                metrics = dt.optimize.compact(
                    partition_filters=[
                        ("env", "in", chosen_envs),
                        ("period", "in", chosen_periods),
                    ],
                    target_size=small_bytes,
                )
        except CommitFailedError:
            # Another machine's compaction committed over the same files first (Delta's
            # conflict check refuses the second): its version holds the rows, once.
            report.conceded.append(table)
            return False
        report.partitions += metrics.get("partitionsOptimized", 0)
        report.files_in += metrics.get("numFilesRemoved", 0)
        report.files_out += metrics.get("numFilesAdded", 0)
        report.rows += sum(
            f.rows
            for f in delta.data_files(lake, table, chosen_envs, dt=dt)
            if (f.env, f.period) in set(crowded)
        )
    if small_bytes is not None and vacuum_hours is None:
        return bool(crowded)  # a collection's pass: the sweep deletes what it replaced
    if not crowded and envs is not None:
        return False  # a collection's pass: the nightly one vacuums the whole table
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
    return bool(crowded)


def _configure(dt) -> None:
    """Bring a table created with older settings to delta.TABLE_CONFIG (one commit, once)."""
    current = dt.metadata().configuration
    changed = {k: v for k, v in delta.TABLE_CONFIG.items() if current.get(k) != v}
    if changed:
        dt.alter.set_table_properties(changed, raise_if_not_exists=False)


def _sweep_table(lake: Lake, table: str, margin_s: float, report: CompactionReport) -> None:
    """Delete the table's replaced files no version of the last `margin_s` seconds names (a
    reader that listed its snapshot within the margin keeps them); checkpoint a long log and
    delete log entries past the log retention. Nothing is committed when nothing is due."""
    dt = lake.table(table)
    if dt is None:
        return
    root = lake.path(table)
    keep = _deletions_due(dt, margin_s)
    if keep is not None:
        with lakefs.storage_errors("vacuum", root):
            due = dt.vacuum(
                retention_hours=0,
                dry_run=True,
                enforce_retention_duration=False,
                keep_versions=keep,
            )
            # The log keeps a removed file's tombstone for an hour after vacuum deleted it:
            # vacuum only (two commits) when one of them is still on disk.
            present = [path for path in due if lakefs.exists(lakefs.join(root, unquote(path)))]
            if present:
                dt.vacuum(
                    retention_hours=0,
                    dry_run=False,
                    enforce_retention_duration=False,
                    keep_versions=keep,
                )
                report.files_vacuumed += len(present)
    if dt.version() - _last_checkpoint(root) >= CHECKPOINT_AFTER_COMMITS:
        with lakefs.storage_errors("checkpoint", root):
            dt = lake.table(table)
            dt.create_checkpoint()
            dt.cleanup_metadata()


def _removed_files(entry: dict) -> int:
    """How many files a commit removed (optimize, delete, overwrite), from its metrics."""
    metrics = entry.get("operationMetrics") or {}
    return sum(
        int(v)
        for k, v in metrics.items()
        if "removed" in k.lower() and "file" in k.lower() and str(v).isdigit()
    )


def _deletions_due(dt, margin_s: float) -> list[int] | None:
    """The versions a vacuum keeps (every one committed within the last `margin_s` seconds,
    the one current when the margin began, the latest) when a commit older than the margin
    removed files no later vacuum was asked to delete; else None (nothing due, or a log too
    short to tell: nothing is deleted). Reads the newest commits only."""
    since_ms = (time.time() - margin_s) * 1000
    for limit in (40, 400):
        history = dt.history(limit=limit)  # newest first
        keep, margin_started, due, covered_ms = {dt.version()}, False, False, None
        for entry in history:
            ts, version = entry.get("timestamp", 0), entry.get("version")
            if not margin_started and version is not None:
                keep.add(version)  # the margin's versions, then the one current at its start
                margin_started = ts < since_ms
            if covered_ms is not None and ts < covered_ms:
                break  # older removals: deleted by that vacuum
            if ts < since_ms and _removed_files(entry):
                due = True
            if entry.get("operation") == "VACUUM START" and covered_ms is None:
                params = entry.get("operationParameters") or {}
                given = params.get("specifiedRetentionMillis")
                kept_ms = int(
                    given if given is not None else params.get("defaultRetentionMillis", 0)
                )
                # This module's vacuums pass 0 and keep the margin's versions instead.
                covered_ms = ts - (kept_ms or margin_s * 1000)
        else:
            if len(history) == limit:
                continue  # the newest vacuum is further back: read more of the log
        return sorted(keep) if due and margin_started else None
    return None


def _last_checkpoint(root: str) -> int:
    """The version of the table's last checkpoint (-1 without one)."""
    path = lakefs.join(root, "_delta_log", "_last_checkpoint")
    try:
        if lakefs.is_remote(path):
            with lakefs.storage_errors("reading", path):
                text = lakefs.filesystem().cat_file(path)
        else:
            text = Path(path).read_bytes()
        return int(json.loads(text)["version"])
    except (FileNotFoundError, KeyError, ValueError):
        return -1
