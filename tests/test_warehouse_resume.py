"""A warehouse update killed at any point (SIGKILL: no handler runs) leaves the warehouse as the
previous update left it; the next update loads the same runs incrementally (no full rebuild),
and the marts equal a full rebuild's."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
import test_golden_figures as golden
from test_warehouse_incremental import _tables, assert_same_marts

from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake

pytestmark = [pytest.mark.server_agnostic, pytest.mark.e2e]

NIGHTS = 5  # of the golden lake: the last two land every family (recorded_families.json)

# The child: one update of argv[2] from the lake argv[1], SIGKILLed at the point argv[3].
CHILD = r"""
import os, signal, sys
from yardstick.storage import plan, warehouse
from yardstick.storage.lakefs import Lake
lake_dir, target, point = sys.argv[1], sys.argv[2], sys.argv[3]

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

def after(count, function):
    calls = [0]
    def wrapper(*args, **kwargs):
        result = function(*args, **kwargs)
        calls[0] += 1
        if calls[0] >= count:
            die()
        return result
    return wrapper

if point == "mid-load":  # raw tables loaded, the lake survey written, in the transaction
    warehouse._save_unfinished = die
elif point == "mid-models":  # ten models replayed
    plan._drop_temporary = after(10, plan._drop_temporary)
elif point == "before-commit":  # every model replayed, the runs not yet marked loaded
    warehouse._append_loaded = die
elif point == "mid-dbt":  # dbt itself (no plan fits), after its fifth insert
    from yardstick.storage import kept
    kept.plan = lambda key: None  # nor one another warehouse recorded
    from dbt.adapters.sql.connections import SQLConnectionManager
    original = SQLConnectionManager.add_query
    inserts = [0]
    def add_query(self, sql, *args, **kwargs):
        result = original(self, sql, *args, **kwargs)
        inserts[0] += " insert into " in f" {sql.lower()}"
        if inserts[0] >= 5:
            die()
        return result
    SQLConnectionManager.add_query = add_query
warehouse.update(Lake.at(lake_dir), target)
print("not killed")
"""


@pytest.fixture(scope="module")
def resumable(tmp_path_factory):
    """The golden lake (NIGHTS nights), a warehouse holding all but its last two nights (its
    dbt plan recorded), and a full rebuild of the whole lake: (lake, warehouse, rebuilt)."""
    root = tmp_path_factory.mktemp("resume")
    lake_dir = root / "lake"
    golden.land_nights(lake_dir, NIGHTS)
    runs = sorted(run for _, run in delta.complete_runs(Lake.at(lake_dir)))
    # The night before the last two, and everything before it.
    until = max(r for r in runs if r < _night(NIGHTS - 2))
    target = root / "w.duckdb"
    first = warehouse.update(Lake.at(lake_dir), target, until_run_id=min(runs[len(runs) // 3 :]))
    second = warehouse.update(Lake.at(lake_dir), target, until_run_id=until)
    assert (first.mode, second.mode) == ("full", "incremental")
    # The plan was recorded by the rebuild's second batch (its days, then the latest day's
    # runs apart) or by this update: either way the warehouse holds one.
    assert "plan" in second.parse_mode, second.parse_mode
    rebuilt = warehouse.build(Lake.at(lake_dir), root / "rebuilt.duckdb")
    return lake_dir, target, rebuilt


def _night(index: int) -> str:
    """The run id prefix of the golden lake's `index`-th nightly run."""
    return f"{golden.FIRST_NIGHT + timedelta(days=index):%Y%m%dT%H%M%SZ}"


def _loaded(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(f"select count(*) from {warehouse.LOADED}").fetchone()[0]
    finally:
        con.close()


def _kill_at(lake_dir: Path, target: Path, point: str) -> None:
    """Run one update of `target` in a child process, SIGKILLed at `point`."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(lake_dir), str(target), point],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == -signal.SIGKILL, (point, child.stdout, child.stderr[-2000:])


@pytest.mark.parametrize("point", ["mid-load", "mid-models", "before-commit", "mid-dbt"])
def test_an_update_killed_at_any_point_resumes(resumable, tmp_path, point):
    lake_dir, built, rebuilt = resumable
    target = tmp_path / "w.duckdb"
    shutil.copyfile(built, target)
    before = _loaded(target)
    if point == "mid-dbt":
        # No plan fits (as after an upgrade of dbt): the update runs dbt itself, on a copy.
        con = duckdb.connect(str(target))
        con.execute("update yardstick.meta set value = 'stale' where key = 'plan_key'")
        con.close()
    _kill_at(lake_dir, target, point)
    # Nothing of the killed update is in the warehouse.
    assert _loaded(target) == before

    result = warehouse.update(Lake.at(lake_dir), target)
    assert result.mode == "incremental", result.reason
    assert result.runs_added == len(delta.complete_runs(Lake.at(lake_dir))) - before
    assert not warehouse.building_path(target).parent.exists()  # a killed copy is removed
    assert_same_marts(_tables(target), _tables(rebuilt))
    assert warehouse.update(Lake.at(lake_dir), target).mode == "up-to-date"
