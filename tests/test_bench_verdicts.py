"""bench/verdicts.py at a tiny size, in a subprocess: it lands its scenarios in the real lake
format, builds the warehouse, checks that figure_trends holds every landed point, and writes
every scenario's figures and every target of issue 30 (met or missed) to its JSON, for the
defaults and for a --vars pass. No figure is asserted: with 2 series per scenario they are
noise; the bench's full size belongs to the README."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bench():
    """bench/verdicts.py as a module (its SCENARIOS and TARGETS), loaded by path."""
    spec = importlib.util.spec_from_file_location("bench_verdicts", REPO / "bench" / "verdicts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_tiny_verdicts_bench_runs_and_reports_every_target(tmp_path):
    out = tmp_path / "verdicts.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "verdicts.py"), "--replicates", "2",
         "--nights", "33", "--vars", "{verdict_alpha: 0.002}", "--root", str(tmp_path),
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    bench = _bench()
    record = json.loads(out.read_text())
    assert [p["vars"] for p in record["passes"]] == [{}, {"verdict_alpha": 0.002}]
    for figures in (p["figures"] for p in record["passes"]):
        assert set(figures) == {sc.name for sc in bench.SCENARIOS}
        assert all(
            "by_32" in figures[sc.name] for sc in bench.SCENARIOS if sc.kind in bench.CHANGES
        )
    for targets in (p["targets"] for p in record["passes"]):
        assert [t["target"] for t in targets] == [t.label for t in bench.TARGETS]
        assert all(isinstance(t["met"], bool) for t in targets)
    assert "| target | bound | measured |" in proc.stdout
    assert not list(tmp_path.glob("verdicts-*")), "the work folder is left behind"
