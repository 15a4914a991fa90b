"""bench/runtime_modes.py at a tiny size (the plain mode, one round), in a subprocess: its
JSON holds the mode's figures. No time is asserted: the figures belong to the bench."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.server_agnostic
def test_the_runtime_modes_bench_runs_tiny(tmp_path):
    out = tmp_path / "modes.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "runtime_modes.py"), "--rounds", "1",
         "--modes", "plain", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    figures = json.loads(out.read_text())["figures"]
    assert set(figures) == {"plain"}
    assert figures["plain"]["cpu_s"] > 0 and figures["plain"]["server_cpu_s"] == 0
    assert "| plain |" in proc.stdout
