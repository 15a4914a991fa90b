"""A missing site's environments, as the hub records them: a `missing` run row with the reason
and no duration, machine or pid (nothing was measured); the index, the report and the verdict
(table and Prefect event) say "missing: <reason>", never a time or the hub's pid."""

from __future__ import annotations

import os

from yardstick.flows.announce import message, verdict_events
from yardstick.flows.sites import SiteRun, site_outcomes, worker_command
from yardstick.reports.render import render_reports
from yardstick.settings.config import Environment
from yardstick.storage import delta, lakefs, warehouse
from yardstick.storage.lakefs import Lake

WHY = (
    "no worker of work queue 'far' started its run within 900 s (is "
    f"`{worker_command('far')}` running there?)"
)


def test_a_missing_sites_environment_says_missing_with_the_reason_everywhere(tmp_path):
    lake_dir, wh, out = str(tmp_path / "lake"), tmp_path / "w.duckdb", tmp_path / "reports"
    env = Environment(name="cache-far", url="redis://127.0.0.1:1/0", mode="read-only", site="far")
    run_id = delta.new_run_id()
    part = SiteRun("far", [env], flow_run_id=None, state="CANCELLED", missing=WHY)

    (outcome,) = site_outcomes([part], run_id, Lake.at(lake_dir), "quick")
    assert (outcome.env, outcome.status, outcome.error) == (
        "cache-far",
        "missing",
        f"site far: {WHY}",
    )
    (runs,) = [f for f in delta.current_files(Lake.at(lake_dir), ["runs"])]
    (row,) = lakefs.read_table(runs.path).to_pylist()
    # Written by this (the hub's) process, it names no process at all.
    assert row["status"] == "missing" and row["duration_s"] is None
    assert (row["prober_hostname"], row["prober_pid"], row["worker_pid"]) == (None, None, None)

    warehouse.update(Lake.at(lake_dir), str(wh))
    render_reports(wh, out, run_id, sites=[part.summary()])
    reason = f"site far: {WHY}"
    index = (out / "index.md").read_text()
    lines = [line for line in index.splitlines() if "cache-far" in line]
    assert f"| cache-far | **missing**: {reason} |" in index  # tonight's verdict
    assert f"| cache-far | read-only | **missing**: {reason} |" in index  # environments
    assert f"| far | cache-far | **missing**: {WHY} | nobody |" in index  # sites
    assert f"- **cache-far**: missing: {reason}" in index  # failures
    assert len(lines) == 4, lines
    assert not any("n/a" in line or "µs" in line or " s |" in line for line in lines), lines
    report = (out / "cache-far.md").read_text()
    assert f"**Tonight's verdict: missing**: {reason}." in report
    assert f"Status: **missing**: {reason}. Nothing was measured." in report
    assert "Measured from" not in report and str(os.getpid()) not in report
    assert "n/a s" not in report and "µs" not in report
    (event,) = verdict_events(str(wh), run_id)
    assert event["event"] == "yardstick.missing"
    assert event["payload"]["missing_reason"] == reason
    assert message(event["payload"]) == (
        "redis-yardstick: missing on cache-far",
        f"Run {run_id}: missing: {reason}",
    )
