"""bench/landing.py at a tiny size, in a subprocess: it runs on local disk and moto, lands the
same collection in both formats, and its JSON holds every lake's figures. No time is asserted:
the figures belong to the bench, not to the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.server_agnostic
def test_the_landing_bench_runs_tiny(tmp_path):
    out = tmp_path / "landing.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "landing.py"), "--envs", "2", "--rounds", "1",
         "--history", "1", "--root", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    figures = json.loads(out.read_text())
    assert set(figures["lakes"]) == {"local disk", "S3 (moto, loopback)"}
    for lake in figures["lakes"].values():
        assert lake["delta_s"] > 0 and lake["legacy_s"] > 0
        # One commit per table for the collection, against a file per table and environment.
        assert lake["delta_commits"] < lake["legacy_files"]
    assert "runs" in figures["tables"]
    assert "| local disk |" in proc.stdout
