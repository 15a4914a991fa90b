"""bench/cluster.py at its tiny size, in a subprocess: a 6-node cluster and a standalone server
measured with the families that take no measurement window, then collected once each; it
runs, every node ended ok (its self-check), and its JSON has every figure. No time is
asserted: the figures belong to the bench, not to the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from topologies import redis_cli_for

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
@pytest.mark.server_agnostic  # the bench's own run: tests/test_cluster.py covers each server kind
def test_tiny_cluster_bench_runs_and_checks_itself(newest_binary, tmp_path):
    if redis_cli_for(newest_binary) is None:
        pytest.skip(f"no redis-cli beside {newest_binary.path}: the bench cannot make a cluster")
    out = tmp_path / "cluster.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cluster.py"), "--tiny",
         "--root", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    record = json.loads(out.read_text())
    assert record["self_check"] == {"ok": True, "problems": []}
    figures = record["figures"]
    missing = [name for name in _bench().FIGURES if figures.get(name) is None]
    assert not missing, f"figures missing from the JSON: {missing}"
    assert all(figures[name] > 0 for name in _bench().FIGURES), figures
    assert record["settings"]["nodes"] == 6 and record["settings"]["tiny"]
    assert record["settings"]["server"] == newest_binary.label
    assert len(record["measured"]["measure_s"]["cluster"]) == 1
    assert record["environment"]["git"]["commit"]


def _bench():
    """bench/cluster.py as a module (its FIGURES), loaded by path: bench/ is no package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_cluster", REPO / "bench" / "cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
