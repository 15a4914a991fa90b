"""bench/collect_round.py (P7) at a tiny size, in a subprocess: real servers, a real Prefect
server, a worker's flow-run process and `yardstick collect`; its JSON holds each way's figures.
No time is asserted: the figures belong to the bench, not to the suite. Its structure only: no
warm-up round (each way's one round also makes the lake's tables), a short idle sample."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
@pytest.mark.server_agnostic  # the bench's own servers: the collection tests cover each kind
def test_the_collection_round_bench_runs_tiny(tmp_path):
    out = tmp_path / "collect_round.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "collect_round.py"), "--envs", "2", "--rounds", "1",
         "--no-warm-up", "--idle-s", "0.5", "--root", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    figures = json.loads(out.read_text())
    assert figures["envs"] == 2 and set(figures["results"]) == {"import", "worker", "cli"}
    assert figures["warm_up"] is False and figures["server_idle_cpu_s_per_s"] >= 0
    for way, by_code in figures["results"].items():
        median = by_code["this"]["median"]
        assert median["exits"] == [0], way
        assert median["cpu_s"] > 0 and median["wall_s"] > 0
    worker = figures["results"]["worker"]["this"]["median"]
    assert worker["all_in_cpu_s"] == pytest.approx(worker["cpu_s"] + worker["server_cpu_s"])
    assert figures["targets"] == {"all_in_cpu_s": 3.0, "wall_s": 5.0}
