"""An environment that cannot be reached is recorded while the others complete, and nothing
landed before is lost or changed."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import open_warehouse, run_nightly, write_config

from yardstick.host.embedded import free_port
from yardstick.storage import delta
from yardstick.storage.lakefs import Lake

pytestmark = pytest.mark.e2e

ROUND_TRIP_FIGURES = {
    "rtt_client_p50_us",
    "rtt_client_p99_us",
    "server_ping_usec_per_call",
    "client_over_server_ping",
}


def _rows_of_run(lake_dir: Path, run_id: str) -> dict[tuple[str, str], list]:
    """Every current row of one run, per table and environment (compaction may have moved
    them into another file: what must survive is the rows)."""
    found: dict[tuple[str, str], list] = {}
    for f in delta.current_files(Lake.at(lake_dir)):
        data = pq.read_table(f.path).filter(pc.equal(pc.field("run_id"), run_id))
        if data.num_rows:
            rows = [repr(row) for row in data.to_pylist()]
            found.setdefault((f.table, f.env), []).extend(rows)
    return {key: sorted(rows) for key, rows in found.items()}


# Failure isolation and what survives: the healthy server's kind changes none of it.
@pytest.mark.server_agnostic
def test_unreachable_environment_fails_alone_and_earlier_data_survives(
    prefect_server, redis_server, tmp_path
):
    # Read-only keeps the run short (no scratch experiments); isolation does not depend on mode.
    good = {"name": "good", "url": redis_server.url, "mode": "read-only"}
    dead = {"name": "dead", "url": f"redis://127.0.0.1:{free_port()}/0", "mode": "scratch"}

    # A first, clean run.
    first_config = write_config(tmp_path / "first.yaml", [good])
    state, first = run_nightly(tmp_path, config_path=str(first_config))
    assert state.is_completed(), state.message
    landed = _rows_of_run(tmp_path / "lake", first.run_id)
    assert len(landed) >= 4

    # A second run with an environment nobody listens on.
    config = write_config(tmp_path / "envs.yaml", [dead, good])
    state, summary = run_nightly(tmp_path, config_path=str(config))
    assert state.is_failed()
    assert "dead" in state.message and "good" not in state.message
    outcomes = {o.env: o for o in summary.outcomes}
    assert outcomes["good"].status == "ok" and outcomes["good"].error is None
    assert outcomes["dead"].status == "failed"
    assert "connect" in outcomes["dead"].error.lower()
    assert summary.run_id != first.run_id

    # Nothing landed earlier was changed or removed (compaction merged it into other files).
    assert _rows_of_run(tmp_path / "lake", first.run_id) == landed
    assert _rows_of_run(tmp_path / "lake", summary.run_id)

    # The failure is recorded in the lake (and so in the warehouse).
    con = open_warehouse(tmp_path / "warehouse.duckdb")
    runs = dict(
        con.execute(
            "select env, (status, error) from runs where run_id = ?", [summary.run_id]
        ).fetchall()
    )
    assert runs["good"] == ("ok", None)
    assert runs["dead"][0] == "failed" and "connect" in runs["dead"][1].lower()
    dead_steps = con.execute(
        "select status from steps where run_id = ? and env = 'dead'", [summary.run_id]
    ).fetchall()
    assert dead_steps and "ok" not in {s for (s,) in dead_steps} and ("failed",) in dead_steps
    good_figures = {
        f
        for (f,) in con.execute(
            "select figure from figures where run_id = ? and env = 'good'", [summary.run_id]
        ).fetchall()
    }
    assert ROUND_TRIP_FIGURES <= good_figures
    assert con.execute("select count(*) from figures where env = 'dead'").fetchone() == (0,)
    # Both runs of `good` are in the history.
    assert con.execute(
        "select count(distinct run_id) from figures where env = 'good'"
    ).fetchone() == (2,)
    con.close()

    # Reports: the good one is complete, the failed one says why, the index lists it.
    out = tmp_path / "out"
    good_report = (out / "good.md").read_text()
    assert all(f"`{figure}`" in good_report for figure in ROUND_TRIP_FIGURES)
    assert "Not everything was measured" not in good_report
    dead_report = (out / "dead.md").read_text()
    assert "Status: **failed**" in dead_report
    assert "connect" in dead_report.lower() and "No fingerprint was recorded" in dead_report
    index = (out / "index.md").read_text()
    failures = index.split("## Failures", 1)
    assert len(failures) == 2 and "**dead**" in failures[1] and "**good**" not in failures[1]
    assert summary.run_id in good_report and summary.run_id in dead_report
