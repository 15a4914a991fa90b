"""Memory and key space through a real Prefect flow: a scratch environment (an empty
database) and a read-only one (a hand-built key space) on one server, measured, landed,
built and rendered with the nightly flow's own tasks."""

from __future__ import annotations

import pytest
import redis
from conftest import open_warehouse
from prefect import flow
from prefect.utilities.annotations import quote

from yardstick.flows.measure import measure_environment
from yardstick.flows.nightly import render, update_warehouse
from yardstick.settings.config import Environment
from yardstick.settings.profiles import PROFILES
from yardstick.storage import delta
from yardstick.storage.lakefs import Lake

pytestmark = pytest.mark.e2e

FAMILIES = ["fingerprint", "memory", "keyspace"]


@flow(name="memory-test")
def memory_flow(envs: list[Environment], lake_dir: str, warehouse_path: str, out_dir: str):
    """Measure the memory families on each environment, then build and render."""
    run_id = delta.new_run_id()
    outcomes = [
        measure_environment(
            env, quote(PROFILES["quick"]), run_id, Lake.at(lake_dir), "localhost", families=FAMILIES
        )
        for env in envs
    ]
    update_warehouse(Lake.at(lake_dir), warehouse_path)
    render(warehouse_path, out_dir, run_id)
    return run_id, outcomes


def test_memory_sections_on_scratch_and_read_only(prefect_server, redis_server, tmp_path):
    site = redis.Redis(port=redis_server.port, db=0)
    pipe = site.pipeline(transaction=False)
    for i in range(500):
        pipe.set(f"session:{i}", "s" * 60)
    for i in range(20):
        pipe.hset(f"article:{i}", mapping={f"f{j}": "a" * 90 for j in range(20)})
    pipe.execute()
    envs = [
        Environment(name="scratch", url=redis_server.url.replace("/0", "/1"), mode="scratch"),
        Environment(name="site", url=redis_server.url, mode="read-only"),
    ]
    run_id, outcomes = memory_flow(
        envs, str(tmp_path / "lake"), str(tmp_path / "wh.duckdb"), str(tmp_path / "out")
    )
    assert [o.status for o in outcomes] == ["ok", "ok"]
    assert site.dbsize() == 520 and redis.Redis(port=redis_server.port, db=1).dbsize() == 0

    con = open_warehouse(tmp_path / "wh.duckdb")
    steps = dict(
        con.execute(
            "select family, status from steps where env = 'site' and run_id = ?", [run_id]
        ).fetchall()
    )
    assert steps["memory"] == "skipped" and steps["keyspace"] == "ok"
    natures = dict(
        con.execute(
            "select figure, nature from figures where figure in "
            "('mem_bytes_per_key', 'mem_formula_over_actual', 'ks_prefix_projection_bytes')"
        ).fetchall()
    )
    assert natures == {
        "mem_bytes_per_key": "absolute",
        "mem_formula_over_actual": "ratio",
        "ks_prefix_projection_bytes": "absolute",
    }

    scratch = (tmp_path / "out" / "scratch.md").read_text()
    assert "## Memory: what a key costs" in scratch and "difference per key" in scratch
    assert "promises room that is not there" in scratch  # the direction is stated
    # The key names it measured (yardstick:mem:string:key:%06d, 31 bytes) and the value size.
    row = next(line for line in scratch.splitlines() if line.startswith("| `string` (string)"))
    assert "| 31 B | 100 B |" in row
    assert "waited until used_memory stopped falling" in scratch
    report = (tmp_path / "out" / "site.md").read_text()
    assert "## Memory: what a key costs" not in report  # read-only: no load, no section
    assert "## Key space by prefix" in report
    assert "`session:*`" in report and "`article:*`" in report
    assert "Big keys: by elements and by bytes" in report and "**Budget:**" in report
