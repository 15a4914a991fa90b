"""Compaction merges a partition's small files into one, loses no row and doubles none, even
when killed halfway or when a collection lands meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from yardstick.storage import compaction, lake
from yardstick.storage.schemas import to_table

START = datetime(2026, 10, 28, 2, 0, tzinfo=UTC)


def _land(lake_dir: Path, env: str, when: datetime) -> str:
    """Land one collection-like run: a runs row, two steps and a few commandstats rows."""
    run_id = lake.new_run_id(when)
    steps = [{"family": f, "status": "ok", "started_at": when} for f in ("slowlog", "counters")]
    lake.write(lake_dir, "steps", env, run_id, to_table("steps", steps))
    stats = [
        {"server_run_id": "s1", "taken_at": when, "command": cmd, "calls": i, "usec": 10 * i}
        for i, cmd in enumerate(("get", "set", "ping"))
    ]
    lake.write(
        lake_dir, "commandstats_snapshots", env, run_id, to_table("commandstats_snapshots", stats)
    )
    lake.write(lake_dir, "slowlog_entries", env, run_id, to_table("slowlog_entries", []))
    run = {"profile": "collect", "started_at": when, "status": "ok"}
    lake.write(lake_dir, "runs", env, run_id, to_table("runs", [run]))
    return run_id


def _rows(lake_dir: Path) -> dict[str, list[tuple]]:
    """Every current row per table, sorted (what any reader following the rule sees)."""
    found: dict[str, list[tuple]] = {}
    for f in lake.current_files(lake_dir):
        data = pq.read_table(f.path)
        keys = [c for c in data.column_names if c != "schema_version"]
        found.setdefault(f.table, []).extend(
            (f.env, *row.values()) for row in data.select(keys).to_pylist()
        )
    return {table: sorted(rows, key=repr) for table, rows in found.items()}


@pytest.fixture
def small_lake(tmp_path: Path) -> Path:
    """Two environments, 12 collections each over two months (October and November)."""
    lake_dir = tmp_path / "lake"
    for env in ("a", "b"):
        for i in range(12):
            _land(lake_dir, env, START + timedelta(hours=12 * i))
    return lake_dir


def test_empty_tables_land_no_file(small_lake: Path):
    assert not (small_lake / "slowlog_entries").exists()


def test_one_file_per_table_environment_and_month(small_lake: Path):
    before = _rows(small_lake)
    assert len(lake.current_files(small_lake)) == 2 * 12 * 3
    report = compaction.compact(small_lake)
    files = lake.current_files(small_lake)
    # 3 tables x 2 environments x 2 months, every one compacted.
    assert len(files) == 12
    assert {f.kind for f in files} == {"compacted"}
    assert report.files_in == 72 and report.files_out == 12
    assert _rows(small_lake) == before
    # Nothing else is left on disk: replaced files were deleted.
    assert len(list(small_lake.rglob("*.parquet"))) == 12
    # Idempotent: a second pass has nothing to merge.
    again = compaction.compact(small_lake)
    assert again.files_in == 0 and _rows(small_lake) == before


def test_new_landings_merge_into_the_month_file(small_lake: Path):
    compaction.compact(small_lake)
    late = _land(small_lake, "a", START + timedelta(days=10))
    before = _rows(small_lake)
    compaction.compact(small_lake)
    folder = small_lake / "runs" / "env=a" / f"period={lake.run_period(late)}"
    assert [p.name for p in folder.glob("*.parquet")] == ["compacted-g000002.parquet"]
    assert _rows(small_lake) == before


def test_legacy_day_folders_move_into_periods(tmp_path: Path):
    lake_dir = tmp_path / "lake"
    run_id = _land(lake_dir, "a", START)
    legacy = lake_dir / "runs" / "env=a" / "date=2026-10-28"
    legacy.mkdir(parents=True)
    (lake.file_path(lake_dir, "runs", "a", run_id)).rename(legacy / f"{run_id}.parquet")
    before = _rows(lake_dir)
    compaction.compact(lake_dir)
    assert not legacy.exists()
    assert _rows(lake_dir) == before


KILL = """
import os, sys
from pathlib import Path
from yardstick.storage import compaction, lake
where = sys.argv[2]
if where == "before-commit":
    lake.os.link = lambda *a, **k: os._exit(9)  # dies with the merged file still temporary
else:
    calls = []
    def die(members):
        calls.append(1)
        if len(calls) == 2:  # the first partition finished, the second committed: die
            os._exit(9)
        original(members)
    original = compaction._delete_inputs
    compaction._delete_inputs = die
compaction.compact(Path(sys.argv[1]))
"""


@pytest.mark.parametrize("where", ["before-commit", "after-commit"])
def test_compaction_killed_halfway_loses_and_doubles_nothing(small_lake: Path, where: str):
    before = _rows(small_lake)
    killed = subprocess.run([sys.executable, "-c", KILL, str(small_lake), where], check=False)
    assert killed.returncode == 9
    # Right after the kill, a reader following the rule sees every row exactly once.
    assert _rows(small_lake) == before
    temps = list(small_lake.rglob(".*.tmp-*"))
    if where == "before-commit":
        # The half-written merge is a hidden temporary file: make it look an hour old.
        assert temps
        for tmp in temps:
            os.utime(tmp, (time.time() - 2 * compaction.STALE_TMP_S,) * 2)
    report = compaction.compact(small_lake)
    assert _rows(small_lake) == before
    assert len(lake.current_files(small_lake)) == 12
    # The next compaction removes what the killed one left, and says so.
    assert report.leftovers_removed
    assert "interrupted" in report.summary()
    assert not list(small_lake.rglob(".*.tmp-*"))
    assert len(list(small_lake.rglob("*.parquet"))) == 12


def test_a_collection_landing_during_compaction_is_kept(small_lake: Path, monkeypatch):
    landed: list[str] = []
    read_table = pq.read_table

    def read_and_land(path, *args, **kwargs):
        """Land a new collection while the first partition is being merged."""
        if not landed:
            landed.append(_land(small_lake, "a", START + timedelta(hours=1)))
        return read_table(path, *args, **kwargs)

    monkeypatch.setattr(compaction.pq, "read_table", read_and_land)
    before = _rows(small_lake)
    compaction.compact(small_lake)
    monkeypatch.undo()
    after = _rows(small_lake)
    run_ids = {row[1] for row in after["runs"]}
    assert landed[0] in run_ids
    # Every earlier row is still there exactly once, plus the new run's rows.
    for table, rows in before.items():
        assert [r for r in after[table] if r[1] != landed[0]] == rows
    compaction.compact(small_lake)
    assert _rows(small_lake) == after


def test_schema_metadata_names_runs_and_replaced_files(small_lake: Path):
    compaction.compact(small_lake)
    f = next(x for x in lake.current_files(small_lake, ["runs"]) if x.env == "a")
    runs, replaces = lake.read_footer(f.path)
    assert list(runs) == sorted(runs) and len(runs) == len(set(runs)) > 0
    assert all(name.startswith("env=a/period=") for name in replaces)
    assert pa.types.is_string(pq.read_schema(f.path).field("run_id").type)
