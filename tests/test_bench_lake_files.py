"""bench/lake_files.py at a tiny size, in a subprocess: both schemes land and compact a small
real-shaped lake, and its JSON holds the small lake's moments and the extrapolated worst
moments. No file count is asserted against the target: the figures belong to the bench."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.server_agnostic
def test_the_lake_files_bench_runs_tiny(tmp_path):
    out = tmp_path / "lake_files.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "lake_files.py"), "--envs", "1", "--rounds", "4",
         "--round-s", "0.2", "--keys", "200", "--root", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    record = json.loads(out.read_text())
    for scheme in ("today", "change"):
        run = record[scheme]
        assert len(run["steps"]) == 4 and run["small_lake_peak"]["total"] > 0
        assert run["month_files_per_env"] > 0 and run["pass_cpu_s"] >= 0
    model = record["model"]
    for name in ("today", "change_daytime", "change_after_nightly"):
        parts = {k: v for k, v in model[name].items() if k != "files"}
        assert model[name]["files"] == pytest.approx(sum(parts.values()), abs=len(parts))
    worst = max(model["change_daytime"]["files"], model["change_after_nightly"]["files"])
    assert abs(model["change"] - worst) <= 1
    assert model["change_measured_scaled"] > 0 and model["target"] == 30_000
    assert "worst moment: today" in proc.stdout
    # The small lakes are removed.
    assert not list(tmp_path.glob("lake-files-*"))
