"""Compaction merges a partition's small files into one, loses no row and doubles none, even
when killed halfway or when a collection lands meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from yardstick.storage import compaction, delta
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table

START = datetime(2026, 10, 28, 2, 0, tzinfo=UTC)


def _land(lake_dir: Path, env: str, when: datetime) -> str:
    """Land one collection-like run: a runs row, two steps and a few commandstats rows."""
    run_id = delta.new_run_id(when)
    steps = [{"family": f, "status": "ok", "started_at": when} for f in ("slowlog", "counters")]
    delta.write(Lake.at(lake_dir), "steps", env, run_id, to_table("steps", steps))
    stats = [
        {"server_run_id": "s1", "taken_at": when, "command": cmd, "calls": i, "usec": 10 * i}
        for i, cmd in enumerate(("get", "set", "ping"))
    ]
    delta.write(
        Lake.at(lake_dir),
        "commandstats_snapshots",
        env,
        run_id,
        to_table("commandstats_snapshots", stats),
    )
    delta.write(Lake.at(lake_dir), "slowlog_entries", env, run_id, to_table("slowlog_entries", []))
    run = {"profile": "collect", "started_at": when, "status": "ok"}
    delta.write(Lake.at(lake_dir), "runs", env, run_id, to_table("runs", [run]))
    return run_id


def _rows(lake_dir: Path) -> dict[str, list[tuple]]:
    """Every row of each table's current version, sorted (what any Delta reader sees)."""
    found: dict[str, list[tuple]] = {}
    for table in delta.tables_present(Lake.at(lake_dir)):
        data = DeltaTable(str(lake_dir / table)).to_pyarrow_table()
        keys = ["env", *(c for c in data.column_names if c not in ("schema_version", "env"))]
        found[table] = sorted(
            (tuple(row.values()) for row in data.select(keys).to_pylist()), key=repr
        )
    return found


def _data_files_on_disk(lake_dir: Path) -> list[Path]:
    return [p for p in lake_dir.rglob("*.parquet") if "_delta_log" not in p.parts]


@pytest.fixture
def small_lake(tmp_path: Path) -> Path:
    """Two environments, 12 collections each over two months (October and November)."""
    lake_dir = tmp_path / "lake"
    for env in ("a", "b"):
        for i in range(12):
            _land(lake_dir, env, START + timedelta(hours=12 * i))
    return lake_dir


def test_empty_tables_land_nothing(small_lake: Path):
    assert not (small_lake / "slowlog_entries").exists()


def test_one_file_per_table_environment_and_month(small_lake: Path):
    before = _rows(small_lake)
    assert len(delta.current_files(Lake.at(small_lake))) == 2 * 12 * 3
    report = compaction.compact(Lake.at(small_lake), vacuum_hours=0)
    files = delta.current_files(Lake.at(small_lake))
    # 3 tables x 2 environments x 2 months, every one compacted.
    assert len(files) == 12
    assert report.files_in == 72 and report.files_out == 12
    assert _rows(small_lake) == before
    # Nothing else is left on disk: vacuum deleted the replaced files.
    assert len(_data_files_on_disk(small_lake)) == 12
    # Idempotent: a second pass has nothing to merge.
    again = compaction.compact(Lake.at(small_lake))
    assert again.files_in == 0 and _rows(small_lake) == before
    # The log was checkpointed: a reader starts from the checkpoint, not from every commit.
    assert list((small_lake / "runs" / "_delta_log").glob("*.checkpoint.parquet"))


def test_new_landings_merge_into_the_month_file(small_lake: Path):
    compaction.compact(Lake.at(small_lake))
    late = _land(small_lake, "a", START + timedelta(days=10))
    before = _rows(small_lake)
    compaction.compact(Lake.at(small_lake))
    month = [
        f
        for f in delta.data_files(Lake.at(small_lake), "runs", ["a"])
        if f.period == delta.run_period(late)
    ]
    assert len(month) == 1 and month[0].max_run == late
    assert _rows(small_lake) == before


def test_a_lake_of_the_earlier_format_is_migrated_by_the_first_compaction(tmp_path: Path):
    import legacy_lake

    lake_dir = tmp_path / "lake"
    write, delta.write = delta.write, legacy_lake.write
    try:
        run_id = _land(lake_dir, "a", START)
        later = _land(lake_dir, "a", START + timedelta(days=1))
    finally:
        delta.write = write
    # A day folder, from before periods existed.
    legacy = lake_dir / "runs" / "env=a" / "date=2026-10-28"
    legacy.mkdir(parents=True)
    legacy_lake.file_path(lake_dir, "runs", "a", run_id).rename(legacy / f"{run_id}.parquet")
    report = compaction.compact(Lake.at(lake_dir))
    assert report.migrated and "migrated" in report.summary()
    assert not legacy.exists()
    assert delta.complete_runs(Lake.at(lake_dir)) == {("a", run_id), ("a", later)}
    assert not [p for p in lake_dir.rglob("*.parquet") if p.name.startswith("2026")]


KILL = """
import sys
from pathlib import Path
from yardstick.storage import compaction
from yardstick.storage.lakefs import Lake
print("ready", flush=True)
while True:
    compaction.compact(Lake.at(Path(sys.argv[1])), min_files=1)
"""


def test_compaction_killed_at_any_instant_loses_and_doubles_nothing(small_lake: Path):
    import random
    import signal

    before = _rows(small_lake)
    rng = random.Random(11)
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILL, str(small_lake)], stdout=subprocess.PIPE, text=True
        )
        proc.stdout.readline()
        time.sleep(rng.uniform(0.0, 1.5))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # Right after the kill, a Delta reader sees every row exactly once.
        assert _rows(small_lake) == before
    report = compaction.compact(Lake.at(small_lake), vacuum_hours=0)
    assert _rows(small_lake) == before
    assert len(delta.current_files(Lake.at(small_lake))) == 12
    # Files a killed compaction wrote before its commit are orphans: vacuum deletes them.
    assert len(_data_files_on_disk(small_lake)) == 12, report.summary()


LANDER = """
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from test_compaction import START, _land
for i in range(int(sys.argv[3])):
    print(_land(Path(sys.argv[1]), "a", START + timedelta(hours=1, minutes=i)), flush=True)
"""


def test_collections_landing_during_compaction_are_kept(small_lake: Path):
    before = _rows(small_lake)
    lander = subprocess.Popen(
        [sys.executable, "-c", LANDER, str(small_lake), str(Path(__file__).parent), "6"],
        stdout=subprocess.PIPE,
        text=True,
    )
    for _ in range(3):
        compaction.compact(Lake.at(small_lake), min_files=1)
    out, _ = lander.communicate(timeout=120)
    landed = out.split()
    assert lander.returncode == 0 and len(landed) == 6
    after = _rows(small_lake)
    run_ids = {row[1] for row in after["runs"]}
    assert set(landed) <= run_ids
    # Every earlier row is still there exactly once, plus the new runs' rows.
    for table, rows in before.items():
        assert [r for r in after[table] if r[1] not in landed] == rows
    compaction.compact(Lake.at(small_lake))
    assert _rows(small_lake) == after


def test_yardstick_lake_migrate_converts_once_and_says_so(tmp_path: Path):
    import legacy_lake
    from typer.testing import CliRunner

    from yardstick.app import cli

    lake_dir = tmp_path / "lake"
    write, delta.write = delta.write, legacy_lake.write
    try:
        run_id = _land(lake_dir, "a", START)
    finally:
        delta.write = write
    runner = CliRunner()
    first = runner.invoke(cli.app, ["lake", "migrate", "--lake", str(lake_dir)])
    assert first.exit_code == 0, first.output
    assert "migrated 3 tables" in first.output and "counted" in first.output
    assert delta.complete_runs(Lake.at(lake_dir)) == {("a", run_id)}
    again = runner.invoke(cli.app, ["lake", "migrate", "--lake", str(lake_dir)])
    assert again.exit_code == 0 and "nothing to migrate" in again.output


def _collection_pass(lake_dir: Path, margin_s: float, small_bytes: int = 4 << 20):
    return compaction.compact(
        Lake.at(lake_dir),
        min_files=2,
        tables=["runs", "steps", "commandstats_snapshots"],
        envs=["a", "b"],
        small_bytes=small_bytes,
        reader_margin_s=margin_s,
    )


def test_a_collection_pass_merges_the_new_files_and_leaves_the_month_file(small_lake: Path):
    # A big month: a run of 20,000 commandstats rows.
    when = START + timedelta(days=5)
    stats = [
        {"server_run_id": "s1", "taken_at": when, "command": f"c{i}", "calls": i, "usec": i}
        for i in range(20_000)
    ]
    big = to_table("commandstats_snapshots", stats)
    delta.write(Lake.at(small_lake), "commandstats_snapshots", "a", delta.new_run_id(when), big)
    compaction.compact(Lake.at(small_lake), vacuum_hours=0)
    merged = delta.data_files(Lake.at(small_lake), "commandstats_snapshots")
    month = {f.path for f in merged}
    for i in range(3):
        _land(small_lake, "a", START + timedelta(days=10, minutes=5 * i))
    before = _rows(small_lake)
    # Below the month files' size: only the three new single-run files are merged.
    biggest = max(f.size_bytes for f in merged)
    report = _collection_pass(small_lake, margin_s=3600, small_bytes=biggest)
    files = delta.data_files(Lake.at(small_lake), "commandstats_snapshots")
    # The big month file is kept as it was; the three new ones are merged into one.
    assert {f.path for f in merged if f.size_bytes == biggest} <= month & {f.path for f in files}
    assert len([f for f in files if f.env == "a" and f.period == "2026-11"]) == 2
    assert report.files_in >= 3
    assert _rows(small_lake) == before


def test_replaced_files_go_once_the_readers_margin_has_passed(small_lake: Path, monkeypatch):
    # Every pass sweeps every table (else only the first pass of each hour does).
    monkeypatch.setattr(compaction, "SWEEP_ALL_WITHIN_MIN", 60)
    compaction.compact(Lake.at(small_lake), vacuum_hours=0)
    for i in range(2):
        _land(small_lake, "a", START + timedelta(days=10, minutes=5 * i))
    reader = DeltaTable(str(small_lake / "commandstats_snapshots"))  # a snapshot, listed now
    expected = reader.to_pyarrow_table().num_rows
    on_disk = len(_data_files_on_disk(small_lake))
    report = _collection_pass(small_lake, margin_s=3600)
    assert report.files_in and report.files_vacuumed == 0
    # Within the margin: the replaced files stay, the older snapshot still reads every row.
    assert len(_data_files_on_disk(small_lake)) == on_disk + 3
    assert reader.to_pyarrow_table().num_rows == expected
    time.sleep(1.1)
    again = _collection_pass(small_lake, margin_s=1)
    current = sum(
        len(delta.data_files(Lake.at(small_lake), t))
        for t in delta.tables_present(Lake.at(small_lake))
    )
    assert again.files_vacuumed == 3 * 3 and len(_data_files_on_disk(small_lake)) == current
    # Nothing left to delete: the next pass commits nothing (no vacuum of deleted files).
    version = DeltaTable(str(small_lake / "runs")).version()
    assert _collection_pass(small_lake, margin_s=1).files_vacuumed == 0
    assert DeltaTable(str(small_lake / "runs")).version() == version


def test_tables_of_older_settings_take_the_lakes_log_retention(small_lake: Path):
    dt = DeltaTable(str(small_lake / "runs"))
    dt.alter.set_table_properties({"delta.logRetentionDuration": "interval 1 days"})
    compaction.compact(Lake.at(small_lake))
    config = DeltaTable(str(small_lake / "runs")).metadata().configuration
    assert config["delta.logRetentionDuration"] == delta.TABLE_CONFIG["delta.logRetentionDuration"]
