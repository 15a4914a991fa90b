"""Retention tiers: per-run detail is kept for a number of days, its aggregates forever.

The key-space scan's per-key rows (keyspace_keys, ~1.5 MB a night for 200,000 keys) and the
round trip's 2 %-bucket histograms (ping_histogram) are what the lake would mostly hold after
a year. Past `detail_days`, a run's detail files are deleted; before that, the figures the
warehouse derived from them (the measures of the round_trip and keyspace families, percentiles
and per-prefix figures included) are written into the lake as `retained_measures`, so a full
rebuild from the lake alone still has every figure of every run. The order makes it safe
against a crash at any instant: detail is deleted only after its aggregates are committed, and
the models prefer the detail where both exist."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from yardstick.storage import lake, lakefs, warehouse
from yardstick.storage.compaction import LAKE_BUSY, lake_lock
from yardstick.storage.schemas import DETAIL_FAMILIES, DETAIL_TABLES, SCHEMA_VERSION, file_schema

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
    lake_dir: str | Path,
    warehouse_path: str | Path,
    detail_days: int = DEFAULT_DETAIL_DAYS,
    today: date | None = None,
) -> RetentionReport:
    """Drop detail files of runs older than `detail_days`, keeping their figures in the lake."""
    start = time.perf_counter()
    lake_dir, warehouse_path = lakefs.lake_root(lake_dir), Path(warehouse_path)
    report = RetentionReport(detail_days)
    today = today or datetime.now(UTC).date()
    cutoff = today - timedelta(days=detail_days)
    with lake_lock(lake_dir) as held:
        if not held:
            report.skipped = LAKE_BUSY
            return report
        old = [
            f
            for f in lake.current_files(lake_dir, list(DETAIL_TABLES))
            if f.kind == "landed" and lake.run_day(f.runs[0]) < cutoff
        ]
        if not old:
            report.wall_s = time.perf_counter() - start
            return report
        retained = _retained_runs(lake_dir)
        needed = {(f.env, f.runs[0]) for f in old} - retained
        loaded = _export(lake_dir, warehouse_path, needed, report) if needed else set()
        dropped = []
        for f in old:
            key = (f.env, f.runs[0])
            if key in retained or key in loaded:
                dropped.append(f.path)
            else:
                report.waiting.append(f"{f.env}/{f.runs[0]}")
        lakefs.delete_many(dropped)
        report.files_dropped += len(dropped)
    report.wall_s = time.perf_counter() - start
    return report


def _retained_runs(lake_dir: lakefs.LakePath) -> set[tuple[str, str]]:
    """(env, run) pairs whose aggregates the lake already keeps."""
    return {(f.env, run) for f in lake.current_files(lake_dir, [RETAINED]) for run in f.runs}


def _export(
    lake_dir: lakefs.LakePath,
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
    schema = file_schema(RETAINED)
    by_env_period: dict[tuple[str, str], list[str]] = {}
    for env, run_id in chosen:
        by_env_period.setdefault((env, lake.run_period(run_id)), []).append(run_id)
    for (env, period), run_ids in sorted(by_env_period.items()):
        mask = pa.compute.and_(
            pa.compute.equal(rows["env"], env), pa.compute.is_in(rows["run_id"], pa.array(run_ids))
        )
        part = rows.filter(mask).drop(["env"])
        part = part.append_column(
            "schema_version", pa.array([SCHEMA_VERSION] * part.num_rows, pa.int16())
        )
        part = part.select(schema.names).cast(schema)
        folder = lake_dir / RETAINED / f"env={env}" / f"period={period}"
        # Written as a compacted file: its footer names the runs it holds (many per file).
        final = folder / f"{lake.COMPACTED_PREFIX}{lake.next_generation(folder):06d}.parquet"
        data = lake.stamp(
            part,
            RETAINED,
            {"yardstick.runs": json.dumps(sorted(run_ids)), "yardstick.replaces": "[]"},
        )
        lake.write_atomic(data, final, f"{final} already exists")
        report.rows_retained += part.num_rows
        report.runs_retained += len(run_ids)
    return set(chosen)
