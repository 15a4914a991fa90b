"""bench/retention.py at a tiny size, in a subprocess: it runs, its self-checks hold (every table
the tool declares is in the real shape, every table the real run landed is generated, landed and
compacted files equal the direct writer's), its JSON has every figure, and the full rebuild's
peak memory (the child's own, wait4) does not grow with twice the history. No time is
asserted: the figures belong to the bench, not to the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

# Tiny: 2 environments (latency monitor on and off) x 4 days (and 8), 4 collections a day
# (still 2 quiet ones a night: the quiet-collection check has something to check), 500 keys,
# one warm night. The run's time is the warehouse updates' (6 dbt builds), not the size.
TINY = [
    "--envs",
    "2",
    "--days",
    "4",
    "--collections-per-day",
    "4",
    "--keys",
    "500",
    "--rounds",
    "1",
]
FIGURES = (
    "lake_files lake_bytes files_per_table rebuild_wall_s rebuild_load_s rebuild_models_s"
    " rebuild_rss_bytes incremental_wall_s incremental_rss_bytes first_update_wall_s"
    " warm_update_wall_s first_vs_warm_change doubling_change files_per_collection"
    " slowlog_rows_quiet_collection slowlog_rows_per_collection trend_query_ms top_nodes"
    " doubled_rebuild_rss_bytes rederive_wall_s rebuild_from_derived_runs"
).split()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """One tiny bench run (with the doubled lake) and its JSON."""
    root = tmp_path_factory.mktemp("retention")
    out = root / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "retention.py"), *TINY, "--workers", "1",
         "--root", str(root), "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc, json.loads(out.read_text())


def test_the_real_shape_knows_every_declared_table():
    """Every table the tool declares for a run kind is in bench/real_shape.json (else: run
    bench/real_shape.py); quick, without the bench."""
    import _schedule

    assert _schedule.unknown_tables() == {}


@pytest.mark.e2e
def test_tiny_bench_runs_and_checks_itself(tiny_run):
    """It ran, its self-checks held, and the JSON holds every figure and target."""
    proc, record = tiny_run
    assert record["self_check"]["ok"], record["self_check"]
    assert record["self_check"]["shape"]["problems"] == []
    figures = record["figures"]
    missing = [name for name in FIGURES if figures.get(name) is None]
    assert not missing, f"figures missing from the JSON: {missing}"
    assert {t["name"] for t in record["targets"]} >= {
        "rebuild_wall_s", "rebuild_rss_bytes", "incremental_wall_s", "incremental_rss_bytes",
        "doubling_change", "first_vs_warm_change", "lake_files", "files_per_collection",
        "slowlog_rows_quiet_collection", "trend_query_ms",
    }  # fmt: skip
    assert all(t["measured"] is not None for t in record["targets"]), record["targets"]
    assert record["environment"]["git"]["commit"]
    assert record["environment"]["machine"]["cores"] >= 1
    for days in ("4", "8"):
        run = record["measured"][days]
        warm = [n["update"] for n in run["warm_nights"]]
        for update in (run["rederive"], run["rebuild"], run["first_night"]["update"], *warm):
            assert "error" not in update, update
        assert [u["mode"] for u in warm] == ["incremental"]
        # The second rebuild imported the closed days the first one kept in the lake.
        assert run["rederive"]["from_derived"] == 0
        assert 0 < run["rebuild"]["from_derived"] < run["rebuild"]["runs_added"]
    # Collections land only what is new: a quiet one lands no SLOWLOG row.
    assert figures["quiet_collections"] > 0
    assert figures["slowlog_rows_quiet_collection"] == 0
    assert "| target (50 environments × 365 days)" in _readme_table(record)


@pytest.mark.e2e
def test_rebuild_memory_does_not_grow_with_history(tiny_run):
    """The full rebuild's peak RSS on twice the history stays within 1.5x + 200 MB."""
    _proc, record = tiny_run
    one = record["measured"]["4"]["rebuild"]["rss_bytes"]
    two = record["measured"]["8"]["rebuild"]["rss_bytes"]
    assert two <= 1.5 * one + 200e6, f"rebuild peak RSS {one / 1e6:.0f} MB -> {two / 1e6:.0f} MB"


def _readme_table(record: dict) -> str:
    """bench/readme_table.py's table of this record."""
    import readme_table

    return readme_table.table(record)


def test_generator_follows_the_declared_schema(monkeypatch):
    """A column added to a table is generated (null: the real shape has not seen it), a
    column dropped is left out; nothing crashes."""
    import _schedule
    import pyarrow as pa

    from yardstick.storage import schemas

    old = schemas.TABLES["slowlog_collections"]
    changed = old.remove(old.get_field_index("read_s")).append(pa.field("queue_bytes", pa.int64()))
    monkeypatch.setitem(schemas.TABLES, "slowlog_collections", changed)
    _schedule._replay_base.cache_clear()
    try:
        day = _schedule.TONIGHT - timedelta(days=1)
        collections = _schedule.collection_tables(0, [day], 12)["slowlog_collections"]
        nightly = _schedule.nightly_run(0, day, 12, 100, 128, True)["slowlog_collections"]
    finally:
        _schedule._replay_base.cache_clear()
    for data in (collections, nightly):
        assert data.schema == schemas.file_schema("slowlog_collections")
        assert data["queue_bytes"].null_count == data.num_rows
        assert "read_s" not in data.column_names


def test_collections_land_only_what_is_new():
    """Each collection's SLOWLOG entries are above its cursor, at most 5 of them (the stream's
    new entries), and the cursor is the previous collection's newest id on the same server."""
    import _schedule

    day = _schedule.TONIGHT - timedelta(days=1)
    tables = _schedule.collection_tables(0, [day], 24)
    reads = tables["slowlog_collections"].to_pylist()
    entries = tables["slowlog_entries"].to_pylist()
    for before, read in zip(reads, reads[1:], strict=False):
        landed = [e["entry_id"] for e in entries if e["run_id"] == read["run_id"]]
        if before["server_run_id"] == read["server_run_id"]:  # else a restart: all is new
            assert read["landed_above_id"] == before["newest_queued_id"]
            assert len(landed) <= _schedule.SLOWLOG_NEW_MAX
        assert all(i > (read["landed_above_id"] or -1) for i in landed)
        assert all(read["oldest_queued_id"] <= i <= read["newest_queued_id"] for i in landed)
