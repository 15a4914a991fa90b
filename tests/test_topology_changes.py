"""Topology changes as findings, on real processes: a frozen replica's lag beyond the
environment's thresholds is flagged on the report's first screen, in the index and in an
event; slots set MIGRATING/IMPORTING are read from the nodes moving them, whichever node is
configured; a CLUSTER FAILOVER between two runs is an environment change of the cluster and
of the two nodes that swapped roles, never a regression. The topology is read by the family's
own functions; the rows land in a lake with tests/lakes (the flows' other tables stand in),
and the real warehouse and reports are built from them."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lakes
import pytest
from topologies import client, running, start_cluster, start_replicated, wait_until

from yardstick.access.environment import Environment
from yardstick.access.topology import Node, discover, member_name
from yardstick.flows.announce import lag_event, message, verdict_events
from yardstick.reports.render import render_reports
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.tasks.topology import _members, record_topology

pytestmark = pytest.mark.e2e

FIRST = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


def _read(env: Environment) -> dict[str, list[dict]]:
    """The topology family's tables for `env` now, as rows."""
    shape = discover(env)
    measured = record_topology(shape, _members(shape, env))
    return {name: table.to_pylist() for name, table in measured.tables.items()}


def _land(lake_dir: Path, env: str, at: datetime, tables: dict, rtt_us: dict | None = None):
    """One full run of `env` from real topology rows: the environment's run with its
    topology, and each member's run with the fingerprint facts the flows write (role,
    address); `rtt_us` gives members a round trip (member -> µs)."""
    run_id = lakes.stable_run_id(at, env)
    rng = random.Random(at.toordinal())
    for node in tables["topology_nodes"]:
        if not node["member"] or node["member"] == env:
            continue
        run = lakes.new_run(lake_dir, node["member"], at, run_id)
        lakes.runs_row(run, "nightly", mode="read-only", url=f"redis://{node['address']}/0")
        lakes.steps(run, {"fingerprint": None, "round_trip": lakes.digest("nightly", "rtt")})
        lakes.fingerprint(
            run,
            facts={
                ("topology", "kind"): node["role"],
                ("topology", "member_of"): env,
                ("topology", "node_role"): node["role"],
                ("topology", "address"): node["address"],
            },
        )
        lakes.ping(run, rtt_us=(rtt_us or {}).get(node["member"], 50.0), rng=rng)
    run = lakes.new_run(lake_dir, env, at, run_id)
    lakes.runs_row(run, "nightly", mode="read-only")
    lakes.steps(run, {"fingerprint": None, "topology": None, "members": None})
    lakes.fingerprint(run, facts={("topology", "kind"): "server"})
    for name in ("topology", "topology_nodes"):
        rows = [{**row, "sampled_at": at} for row in tables[name]]
        run.write(name, rows)
    return run_id


def test_a_frozen_replicas_lag_is_flagged(newest_binary, tmp_path):
    """The replica stopped (SIGSTOP) while 2 MB are written to its primary: its lag, read
    from the primary's view of what it acknowledged, passes the environment's thresholds
    (1 MB, 2 s); the same replica running again is not flagged."""
    with running(start_replicated, newest_binary) as shape:
        (replica,) = shape.replicas
        shape.wait_replicas_up()
        env = Environment(
            name="cache",
            url=shape.by_port(shape.primary).url,
            mode="read-only",
            replica_lag_max_bytes=1_000_000,
            replica_lag_max_s=2.0,
        )
        healthy = _read(env)
        with shape.frozen(replica):
            primary = client(shape.primary)
            for i in range(200):
                primary.set(f"blob:{i}", "x" * 10_000)
            time.sleep(3.5)
            frozen = _read(env)
    before = next(r for r in healthy["topology_nodes"] if r["role"] == "replica")
    row = next(r for r in frozen["topology_nodes"] if r["role"] == "replica")
    assert before["lag_bytes"] < 1_000_000 and (before["lag_s"] or 0) < 2
    assert row["lag_bytes"] > 1_000_000, row
    assert row["lag_s"] >= 2, row
    assert frozen["topology"][0]["replica_lag_max_bytes"] == 1_000_000

    lake = tmp_path / "lake"
    with delta.batch(Lake.at(lake), "lag"):
        _land(lake, "cache", FIRST, healthy)
        last = _land(lake, "cache", FIRST + timedelta(days=1), frozen)
    path = warehouse.build(Lake.at(lake), tmp_path / "w.duckdb")
    flagged = lakes.query(
        path, "select address, lagging from report_topology_nodes where run_id = ?", [last]
    )
    assert [r["address"] for r in flagged if r["lagging"]] == [f"127.0.0.1:{replica}"]
    render_reports(path, tmp_path / "out")
    report = (tmp_path / "out" / "cache.md").read_text()
    first_screen = report.split("## The environment, before the numbers")[0]
    assert "1 replica(s) lagging" in first_screen and f"127.0.0.1:{replica}" in first_screen
    index = (tmp_path / "out" / "index.md").read_text()
    assert "cache: 1 replica(s) lagging" in index
    assert "(over threshold)" in index
    assert "(over threshold)" in (tmp_path / "out" / "comparison.md").read_text()
    (event,) = [e for e in verdict_events(str(path)) if e["payload"]["env"] == "cache"]
    lagging = lag_event(event)
    assert lagging is not None and lagging["event"] == "yardstick.replica-lag"
    assert [r["replica"] for r in lagging["payload"]["replicas_lagging"]] == [
        f"127.0.0.1:{replica}"
    ]
    _subject, body = message(event["payload"])
    assert f"- replica 127.0.0.1:{replica} lagging: " in body


def _node_ids(port: int) -> dict[int, str]:
    """Port -> cluster node id, as the node on `port` knows them."""
    ids = {}
    for line in client(port).execute_command("CLUSTER", "NODES").splitlines():
        fields = line.split()
        ids[int(fields[1].split("@")[0].rsplit(":", 1)[1])] = fields[0]
    return ids


def test_a_cluster_failover_and_a_resharding_are_environment_changes(newest_binary, tmp_path):
    """On a 3 + 3 cluster whose configured node is the third primary: a slot set MIGRATING
    on the first and IMPORTING on the second is seen on both; then a CLUSTER FAILOVER makes
    a replica the primary. Twelve runs before it (same round trips), the failover's run with
    the promoted node's round trip 60 % higher: the cluster and the two swapped nodes are
    flagged environment changed, in one sentence each, and nothing is a regression."""
    with running(start_cluster, newest_binary, primaries=3, replicas_each=1) as cluster:
        first, second, third = cluster.primaries
        env = Environment(name="shop", url=cluster.by_port(third).url, mode="read-only", seeds=None)
        ids = _node_ids(first)
        slot = next(
            s
            for s, _e, owner, *_ in client(first).execute_command("CLUSTER", "SLOTS")
            if int(owner[1]) == first
        )
        client(first).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[second])
        client(second).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[first])
        moving = _read(env)
        for port in (first, second):
            client(port).execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
        steady = _read(env)
        replica = next(r for r, p in cluster.primary_of.items() if p == first)
        client(replica).execute_command("CLUSTER", "FAILOVER")

        def swapped() -> bool:
            seen = client(third).execute_command("CLUSTER", "NODES")
            roles = {
                int(f[1].split("@")[0].rsplit(":", 1)[1]): f[2]
                for f in (line.split() for line in seen.splitlines() if line.strip())
            }
            return "master" in roles[replica] and "slave" in roles[first]

        wait_until(swapped, 30, "the failover, as the configured node sees it")
        after = _read(env)
    nodes = {r["address"]: r for r in moving["topology_nodes"]}
    assert nodes[f"127.0.0.1:{first}"]["migrating_slots"] == 1
    assert nodes[f"127.0.0.1:{second}"]["importing_slots"] == 1
    assert nodes[f"127.0.0.1:{third}"]["migrating_slots"] == 0
    assert moving["topology"][0]["migrating_slots"] == 1
    assert moving["topology"][0]["importing_slots"] == 1
    assert steady["topology"][0]["migrating_slots"] == 0

    lake = tmp_path / "lake"
    promoted = member_name("shop", Node("127.0.0.1", replica, "primary"))
    demoted = member_name("shop", Node("127.0.0.1", first, "replica"))
    with delta.batch(Lake.at(lake), "cluster nights"):
        nights = [steady, moving] + [steady] * 10
        for night, tables in enumerate(nights):
            _land(lake, "shop", FIRST + timedelta(days=night), tables)
        last = _land(
            lake, "shop", FIRST + timedelta(days=len(nights)), after, rtt_us={promoted: 80.0}
        )
    path = warehouse.build(Lake.at(lake), tmp_path / "w.duckdb")
    changed = {
        r["env"]: r
        for r in lakes.query(
            path,
            "select e.env, e.environment_changed, c.topology_change from run_environment as e"
            " left join topology_changes as c on c.run_id = e.run_id and c.env = e.env"
            " where e.run_id = ?",
            [last],
        )
    }
    assert changed["shop"]["environment_changed"]
    sentence = changed["shop"]["topology_change"]
    assert sentence.startswith("Failover since the previous run:")
    assert f"127.0.0.1:{replica} is a primary now" in sentence
    assert f"127.0.0.1:{first} is a replica now" in sentence
    assert changed[promoted]["environment_changed"] and changed[demoted]["environment_changed"]
    untouched = member_name("shop", Node("127.0.0.1", second, "primary"))
    assert not changed[untouched]["environment_changed"]
    # The resharding's night is a change of the cluster and of the two nodes moving the
    # slot; the steady night after it is none.
    resharding = lakes.stable_run_id(FIRST + timedelta(days=1), "shop")
    after_it = lakes.stable_run_id(FIRST + timedelta(days=2), "shop")
    rows = {
        (r["env"], r["run_id"]): r["environment_changed"]
        for r in lakes.query(path, "select env, run_id, environment_changed from run_environment")
    }
    assert rows[("shop", resharding)] and not rows[("shop", after_it)]
    assert rows[(demoted, resharding)] and rows[(untouched, resharding)]
    third_member = member_name("shop", Node("127.0.0.1", third, "primary"))
    assert not rows[(third_member, resharding)]
    verdicts = {
        r["env"]: r
        for r in lakes.query(
            path, "select env, verdict, regressions from verdicts where run_id = ?", [last]
        )
    }
    assert verdicts[promoted]["regressions"] == 0
    assert verdicts[promoted]["verdict"] == "environment changed", verdicts[promoted]
    render_reports(path, tmp_path / "out")
    report = (tmp_path / "out" / "shop.md").read_text()
    first_screen = report.split("## The environment, before the numbers")[0]
    assert "What changed in the servers:** Failover since the previous run" in first_screen
