"""The lake checked against its own log (issue 40, item 2): a commit a crash deleted or left
empty, at each position of a table's log, is repaired where that is safe or refused with the
command that repairs it; runs whose files no commit names are named and added back, never
twice, never silently dropped."""

from __future__ import annotations

import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import finish, open_warehouse, start_yardstick
from deltalake import DeltaTable
from test_compaction import _land

from yardstick.storage import delta, loghealth
from yardstick.storage.lakefs import Lake

START = datetime.now(UTC) - timedelta(hours=3)


def _commit(lake_dir: Path, version: int) -> Path:
    return lake_dir / "runs" / "_delta_log" / f"{version:020d}.json"


def _aged(lake_dir: Path) -> None:
    """Data files written minutes ago (their writers long gone), as a crash leaves them."""
    old = time.time() - 600
    for path in lake_dir.rglob("*.parquet"):
        os.utime(path, (old, old))


@pytest.fixture(scope="module")
def landed(tmp_path_factory) -> tuple[Path, list[str]]:
    """Four runs of one environment; the runs table checkpointed after its second commit
    (versions 0..3, checkpoint at 1)."""
    lake_dir = tmp_path_factory.mktemp("log") / "lake"
    ids = []
    for i in range(4):
        ids.append(_land(lake_dir, "cache", START + timedelta(minutes=5 * i)))
        if i == 1:
            DeltaTable(str(lake_dir / "runs")).create_checkpoint()
    _aged(lake_dir)
    return lake_dir, ids


def _copy(landed, tmp_path: Path) -> tuple[Path, list[str]]:
    lake_dir, ids = landed
    return Path(shutil.copytree(lake_dir, tmp_path / "lake")), ids


def _runs(lake_dir: Path) -> list[str]:
    return sorted(run for _, run in delta.complete_runs(Lake.at(lake_dir)))


@pytest.mark.parametrize("damage", ["deleted", "empty"])
def test_the_last_commit_after_a_checkpoint_lost_is_named_and_its_run_added_back(
    landed, tmp_path, damage
):
    lake_dir, ids = _copy(landed, tmp_path)
    last = _commit(lake_dir, 3)
    last.unlink() if damage == "deleted" else last.write_bytes(b"")
    assert _runs(lake_dir) == ids[:3]  # what delta-rs alone reads: one run gone, silently

    repaired, refused = loghealth.check_and_repair(Lake.at(lake_dir))
    assert refused == []
    (line,) = repaired
    assert line.startswith(f"lake {lake_dir}: table runs: ")
    assert f"1 run(s) whose files no commit named added back (cache/{ids[3]})" in line
    assert _runs(lake_dir) == ids
    assert loghealth.check(Lake.at(lake_dir)) == []  # whole again: nothing said next time
    _land(lake_dir, "cache", START + timedelta(minutes=30))
    assert len(_runs(lake_dir)) == 5  # each run once


def test_a_checkpointed_newest_commit_lost_is_replaced_and_the_next_run_lands(tmp_path):
    lake_dir = tmp_path / "lake"
    ids = [_land(lake_dir, "cache", START + timedelta(minutes=5 * i)) for i in range(3)]
    DeltaTable(str(lake_dir / "runs")).create_checkpoint()
    _commit(lake_dir, 2).unlink()
    with pytest.raises(OSError, match="Invalid table version: 2"):
        _land(lake_dir, "cache", START + timedelta(minutes=20))
    # The collection's check (the log alone, every 5 minutes) does it too.
    repaired, refused = loghealth.check_and_repair(Lake.at(lake_dir), files=False)
    assert refused == [] and repaired == [
        f"lake {lake_dir}: table runs: commit(s) 2 damaged (missing or empty): replaced"
    ]
    assert ids[2] in _runs(lake_dir)
    _land(lake_dir, "cache", START + timedelta(minutes=25))
    assert len(_runs(lake_dir)) == 4


@pytest.mark.parametrize("damage", ["deleted", "empty"])
def test_a_middle_commit_lost_is_refused_with_the_command_then_repaired_by_it(
    landed, tmp_path, damage
):
    lake_dir, ids = _copy(landed, tmp_path)
    middle = _commit(lake_dir, 2)
    middle.unlink() if damage == "deleted" else middle.write_bytes(b"")

    repaired, refused = loghealth.check_and_repair(Lake.at(lake_dir))
    assert repaired == []
    (line,) = refused
    assert line.startswith(f"lake {lake_dir}: table runs: commit(s) 2 damaged")
    assert line.endswith(f"run `yardstick lake repair --lake {lake_dir}`")
    if damage == "empty":  # read as no commit: its run is named (a gap stops any reader)
        assert f"their runs (cache/{ids[2]}) are not read" in line

    done, left = loghealth.repair(Lake.at(lake_dir), loghealth.check(Lake.at(lake_dir)), True)
    assert left == [] and f"added back (cache/{ids[2]})" in done[0]
    assert _runs(lake_dir) == ids
    assert loghealth.check(Lake.at(lake_dir)) == []


def test_a_file_just_written_is_left_to_its_writer(tmp_path):
    lake_dir = tmp_path / "lake"
    _land(lake_dir, "cache", START)
    _land(lake_dir, "cache", START + timedelta(minutes=5))
    _commit(lake_dir, 1).unlink()  # as a landing that has written its file, not yet committed
    assert loghealth.check(Lake.at(lake_dir)) == []


@pytest.mark.e2e
def test_report_names_the_run_of_a_lost_last_commit_and_keeps_it(landed, tmp_path):
    lake_dir, ids = _copy(landed, tmp_path)
    _commit(lake_dir, 3).unlink()
    result = finish(
        start_yardstick(
            tmp_path, "report", "--lake", str(lake_dir), "--warehouse", "w.duckdb", "--out", "out"
        ),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    warned = [line for line in result.stderr.splitlines() if ids[3] in line]
    assert len(warned) == 1 and warned[0].startswith("warning: lake "), result.stderr
    assert ids[3] in (tmp_path / "out" / "index.md").read_text()
    con = open_warehouse(tmp_path / "w.duckdb")
    try:
        assert con.execute("select count(*) from runs").fetchone()[0] == 4
    finally:
        con.close()


@pytest.mark.e2e
def test_report_refuses_a_damaged_middle_with_the_command_that_repairs_it(landed, tmp_path):
    lake_dir, _ = _copy(landed, tmp_path)
    _commit(lake_dir, 2).write_bytes(b"")
    args = ["--lake", str(lake_dir)]
    result = finish(start_yardstick(tmp_path, "report", *args, "--out", "out"), timeout=300)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: lake ") and "yardstick lake repair --lake" in line
    fixed = finish(start_yardstick(tmp_path, "lake", "repair", *args), timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "added back" in fixed.stdout
    again = finish(start_yardstick(tmp_path, "lake", "repair", *args), timeout=300)
    assert "every table's log is whole" in again.stdout


@pytest.mark.e2e
@pytest.mark.server_agnostic
def test_a_nightly_run_repairs_a_lost_last_commit_before_landing_and_says_so(
    landed, prefect_server, redis_server, tmp_path
):
    from conftest import run_nightly, write_config

    lake_dir, ids = _copy(landed, tmp_path)
    _commit(lake_dir, 3).unlink()
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "only",
                "url": redis_server.url,
                "mode": "read-only",
                "families": ["fingerprint"],
            }
        ],
    )
    state, summary = run_nightly(tmp_path, config_path=str(config), lake_dir=str(lake_dir))
    assert state.is_completed(), state.message
    index = (tmp_path / "out" / "index.md").read_text()
    assert "## The lake" in index and f"added back (cache/{ids[3]})" in index
    assert set(ids) <= set(_runs(lake_dir))
