"""The collect flow for real: a scratch and a read-only environment on one server, collected
twice; the lake gets SLOWLOG, latency-monitor and commandstats tables, nothing else runs."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import redis
from conftest import open_warehouse, write_config

from yardstick.flows.collect import COLLECT_FAMILIES, collect
from yardstick.storage import warehouse
from yardstick.storage.lakefs import Lake

pytestmark = pytest.mark.e2e

BUSY = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"


def test_collect_flow_on_scratch_and_read_only(prefect_server, start_redis, tmp_path):
    server = start_redis(extra_args=["--slowlog-log-slower-than", "5000"])
    app = redis.Redis(port=server.port, client_name="shop-app", protocol=2)
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {"name": "scratch-a", "url": server.url, "mode": "scratch"},
            {
                "name": "site-ro",
                "url": server.url,
                "mode": "read-only",
                "same_server_as": "scratch-a",
            },
        ],
    )
    lake_dir = tmp_path / "lake"
    runs = []
    for _ in range(2):
        app.eval(BUSY, 0, 300_000)
        state = collect(config_path=str(config), lake_dir=str(lake_dir), return_state=True)
        assert state.is_completed(), state.message
        summary = state.result()
        assert [(o.env, o.status) for o in summary.outcomes] == [
            ("scratch-a", "ok"),
            ("site-ro", "ok"),
        ]
        runs.append(summary.run_id)

    # Any partition layout below env= (the lake is being reorganised by day or month).
    tables = {f.parts[-4] for f in lake_dir.glob("*/env=*/*/*.parquet")}
    landed = {
        "runs",
        "steps",
        "slowlog_collections",
        "slowlog_entries",
        "latency_collections",
        "commandstats_snapshots",
        "topology",
        "topology_nodes",
        "tool_cost",  # the collection's own CPU and memory (yardstick/host/selfcost.py)
    }
    # The monitor is off here: its latest/history tables have no rows, and may land no file.
    assert landed <= tables <= landed | {"latency_latest", "latency_history"}
    # Only the collection families ran: the experiments never touched the server.
    steps = pq.read_table(lake_dir / "steps").to_pylist()
    assert {s["family"] for s in steps} == set(COLLECT_FAMILIES)
    assert {s["status"] for s in steps} == {"ok"}
    assert {r["profile"] for r in pq.read_table(lake_dir / "runs").to_pylist()} == {"collect"}

    warehouse.build(Lake.at(lake_dir), tmp_path / "w.duckdb")
    con = open_warehouse(tmp_path / "w.duckdb")
    # Collections are not figures (105,000 runs a year per environment): what they found is
    # read from the collection marts.
    assert (
        con.execute("select count(*) from figures where run_id in (?, ?)", runs).fetchone()[0] == 0
    )
    for env in ("scratch-a", "site-ro"):
        key = [runs[1], env]
        gap = con.execute(
            "select g.new_entries, g.lost_entries, g.gap_since_previous_s, r.entries_per_min,"
            " r.recommended_interval_min from slowlog_collection_gaps as g"
            " join slowlog_rates as r using (run_id, env) where run_id = ? and env = ?",
            key,
        ).fetchone()
        # The first collection saw one entry, the second one more: nothing lost.
        assert gap[:2] == (1, 0)
        assert gap[2] > 0 and gap[3] > 0
        assert 1 <= gap[4] <= 60
        threshold = con.execute(
            "select threshold_ms from report_latency_monitor where run_id = ? and env = ?", key
        ).fetchone()[0]
        assert threshold == 0  # a finding: monitor off
        calls = con.execute(
            "select sum(calls_delta) / any_value(interval_s) from counter_intervals"
            " where run_id = ? and env = ? and not counters_reset",
            key,
        ).fetchone()[0]
        assert calls > 0  # counters differenced across collections
    # Per-command counters between the two collections: the application's EVAL among them.
    evals = con.execute(
        "select calls_per_s from report_command_costs where run_id = ? and env = 'scratch-a' "
        "and command = 'eval'",
        [runs[1]],
    ).fetchone()
    assert evals is not None and evals[0] > 0
