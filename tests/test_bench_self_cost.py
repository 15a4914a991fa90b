"""bench/self_cost.py once, in a subprocess: a real `yardstick run --profile quick` on the
embedded default (its direct environment only), its JSON holding P2, the tool's CPU by phase
and its share of the machine. Structure only: no time or ratio is asserted, the figures belong
to the bench."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.e2e, pytest.mark.server_agnostic]


def test_the_self_cost_bench_runs_once(tmp_path):
    out = tmp_path / "self_cost.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "self_cost.py"), "--runs", "1",
         "--env", "embedded", "--root", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    record = json.loads(out.read_text())
    (run,) = record["runs"]
    assert run["environments"] == ["embedded"]  # the forwarded twin left out: the CI's time
    assert run["windows_s"] > 0 and run["process_wall_s"] > 0
    assert 0 < run["p2_windows_over_wall"] == run["windows_s"] / run["process_wall_s"]
    assert set(run["tool_cpu_s_by_phase"]) == {
        "start", "measure", "landing", "warehouse", "rendering"
    }  # fmt: skip
    assert all(cpu_s >= 0 for cpu_s in run["tool_cpu_s_by_phase"].values())
    assert sum(run["tool_cpu_s_by_phase"].values()) <= run["tool_cpu_s"] + 1e-6
    # The tool's own rows stay within what the kernel counted for the whole process tree.
    assert run["tool_cpu_s"] + run["measurement_tools_cpu_s"] <= run["process_tree_cpu_s"] + 0.05
    assert 0 < run["tool_share_of_cores"] <= 1
    assert record["summary"]["target_p2"] == 0.75
    assert "P2" in proc.stdout
