"""Retention tiers: per-run detail is kept for a number of days, its aggregates forever.

The key-space scan's per-key rows (keyspace_keys, ~1.5 MB a night for 200,000 keys) and the
round trip's 2 %-bucket histograms (ping_histogram) are what the lake would mostly hold after
a year. Past `detail_days`, a run's detail rows are deleted (a Delta delete, then a vacuum of
those tables so the files are gone, not only out of the current version); before that, the
figures the warehouse derived from them (the measures of the round_trip and keyspace
families, percentiles and per-prefix figures included) are appended to the lake's
`retained_measures` table, so a full rebuild from the lake alone still has every figure of
every run.

The tool's rule, stated here once: **figures before detail**. Detail is deleted only after
the commit that keeps its aggregates, and only for runs the warehouse has loaded (the others
wait); the models prefer the detail where both exist. A crash at any instant leaves either
both or the aggregates alone."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from yardstick.storage import delta, lakefs, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.lakelock import LAKE_BUSY, lake_lock
from yardstick.storage.schemas import DETAIL_FAMILIES, DETAIL_TABLES, file_schema

RETAINED = "retained_measures"
DEFAULT_DETAIL_DAYS = 30


@dataclass
class RetentionReport:
    """What one retention pass did."""

    detail_days: int
    files_dropped: int = 0
    runs_retained: int = 0
    rows_retained: int = 0
    waiting: list[str] = field(default_factory=list)  # runs not yet in the warehouse
    skipped: str | None = None
    wall_s: float = 0.0

    def summary(self) -> str:
        """One line for logs."""
        if self.skipped:
            return f"retention skipped: {self.skipped}"
        text = (
            f"retention ({self.detail_days} days of detail): dropped {self.files_dropped} "
            f"detail files, kept {self.rows_retained} aggregate rows of {self.runs_retained} runs"
        )
        if self.waiting:
            text += f"; {len(self.waiting)} runs kept whole until the warehouse has them"
        return text


def apply(
    lake: Lake,
    warehouse_path: str | Path,
    detail_days: int = DEFAULT_DETAIL_DAYS,
    today: date | None = None,
) -> RetentionReport:
    """Drop detail files of runs older than `detail_days`, keeping their figures in the lake."""
    start = time.perf_counter()
    warehouse_path = Path(warehouse_path)
    report = RetentionReport(detail_days)
    today = today or datetime.now(UTC).date()
    cutoff = today - timedelta(days=detail_days)
    with lake_lock(lake, doing="dropping its old detail") as held:
        if not held:
            report.skipped = LAKE_BUSY
            return report
        old: set[tuple[str, str]] = set()
        for table in DETAIL_TABLES:
            for f in delta.data_files(lake, table):
                if delta.run_day(f.min_run) < cutoff:
                    old.update(
                        (f.env, run) for run in delta.run_ids_of(f) if delta.run_day(run) < cutoff
                    )
        if not old:
            report.wall_s = time.perf_counter() - start
            return report
        retained = _retained_runs(lake)
        needed = old - retained
        loaded = _export(lake, warehouse_path, needed, report) if needed else set()
        dropped = sorted(key for key in old if key in retained or key in loaded)
        report.waiting = sorted(f"{env}/{run}" for env, run in old - set(dropped))
        if dropped:
            for table in DETAIL_TABLES:
                report.files_dropped += _delete_runs(lake, table, dropped)
    report.wall_s = time.perf_counter() - start
    return report


def _delete_runs(lake: Lake, table: str, runs: list[tuple[str, str]]) -> int:
    """Delete the rows of `runs` from a detail table (a commit per environment), then vacuum
    the table now (the lake lock is held: no update of this machine reads it meanwhile), so
    readers of its files, the warehouse's detail views, see them gone; return files removed."""
    dt = lake.table(table)
    if dt is None:
        return 0
    by_env: dict[str, list[str]] = {}
    for env, run in runs:
        by_env.setdefault(env, []).append(run)
    removed = 0
    root = lake.path(table)
    for env, run_ids in sorted(by_env.items()):
        listed = ", ".join(_sql(run) for run in sorted(run_ids))
        with lakefs.storage_errors("delete", root):
            metrics = dt.delete(f"env = {_sql(env)} and run_id in ({listed})")
        removed += metrics.get("num_removed_files", 0)
    with lakefs.storage_errors("vacuum", root):
        dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
        dt.create_checkpoint()
        dt.cleanup_metadata()
    return removed


def _sql(text: str) -> str:
    """A SQL string literal for a Delta predicate."""
    return "'" + text.replace("'", "''") + "'"


def _retained_runs(lake: Lake) -> set[tuple[str, str]]:
    """(env, run) pairs whose aggregates the lake already keeps."""
    rows = delta.read(lake, RETAINED, columns=["env", "run_id"])
    return set(zip(rows["env"].to_pylist(), rows["run_id"].to_pylist(), strict=True))


def _export(
    lake: Lake,
    warehouse_path: Path,
    runs: set[tuple[str, str]],
    report: RetentionReport,
) -> set[tuple[str, str]]:
    """Write the measures of detail-derived families for `runs` into the lake; return the runs
    the warehouse had (the others keep their detail until it has them)."""
    if not warehouse_path.exists():
        return set()
    families = sorted(set(DETAIL_FAMILIES.values()))
    con = warehouse.connect_read_only(warehouse_path)
    try:
        have = set(con.execute(f"select env, run_id from {warehouse.LOADED}").fetchall())
        chosen = sorted(runs & have)
        if not chosen:
            return set()
        con.execute("create temp table wanted (env varchar, run_id varchar)")
        con.executemany("insert into wanted values (?, ?)", chosen)
        rows = con.sql(
            "select m.env, m.run_id, m.figure, m.subject, m.window_idx, m.value, m.samples "
            "from measures as m join figure_catalog as c on c.figure = m.figure "
            "semi join wanted as w on w.env = m.env and w.run_id = m.run_id "
            f"where c.family in ({', '.join('?' for _ in families)}) "
            "order by m.env, m.run_id, m.figure, m.subject, m.window_idx",
            params=families,
        ).to_arrow_table()
    finally:
        con.close()
    parts = []
    for env in sorted({env for env, _ in chosen}):
        run_ids = sorted(run for e, run in chosen if e == env)
        mask = pc.and_(pc.equal(rows["env"], env), pc.is_in(rows["run_id"], pa.array(run_ids)))
        part = rows.filter(mask)
        # One aggregate row per run at least: a run whose detail gave no figure still counts
        # as kept (its detail may go), by a row without a figure.
        missing = sorted(set(run_ids) - set(part["run_id"].to_pylist()))
        for run_id in run_ids:
            keep = part.filter(pc.equal(part["run_id"], run_id)).drop(["env", "run_id"])
            if run_id in missing:
                keep = pa.table({"figure": pa.array([None], pa.string())})
            parts.append(delta.prepare(RETAINED, env, run_id, _fill(keep)))
        report.rows_retained += part.num_rows
        report.runs_retained += len(run_ids)
    # One commit: every run's aggregates appear together, before any detail is deleted.
    delta.append(lake, RETAINED, pa.concat_tables(parts), "retention")
    return set(chosen)


def _fill(data: pa.Table) -> pa.Table:
    """A retained_measures table with every declared column (absent ones null)."""
    schema = file_schema(RETAINED)
    declared = [f for f in schema if f.name not in ("run_id", "schema_version")]
    return pa.table(
        [
            data[f.name] if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
            for f in declared
        ],
        schema=pa.schema(declared),
    )
