"""bench/cli_latency.py at a tiny size, in a subprocess: it builds its warehouse, runs every
command it measures and writes their figures to its JSON. Only the record's shape and the
exit codes are asserted; the times belong to the bench's full size on a quiet machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ["help", "version", "run_help", "bad_file", "bad_flag", "trend", "changes"]


@pytest.mark.e2e  # a warehouse build (dbt) before the commands
def test_tiny_cli_latency_bench_runs_and_records_every_command(tmp_path):
    out = tmp_path / "cli.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cli_latency.py"), "--tiny",
         "--root", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    record = json.loads(out.read_text())
    assert record["bench"] == "cli_latency" and record["rounds"] == 1
    assert list(record["trees"]) == ["here"]
    results = record["results"]
    assert [r["command"] for r in results] == COMMANDS
    for r in results:
        assert r["runs"] == 1 and r["exit_ok"], r
        assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_bytes"] > 0, r
        assert isinstance(r["heavy_imports"], list) and isinstance(r["within_1s"], bool)
    # The refusals are one line each.
    assert all(r["stderr_lines"] == 1 for r in results if r["command"].startswith("bad_"))
    assert "median of 1 runs" in proc.stdout
    assert not list(tmp_path.glob("cli-latency-*")), "the work folder is left behind"
