"""The collect flow for real: a scratch and a read-only environment on one server, collected
twice; the lake gets SLOWLOG, latency-monitor and commandstats tables, nothing else runs."""

from __future__ import annotations

import duckdb
import pyarrow.parquet as pq
import redis
from conftest import write_config

from yardstick import warehouse
from yardstick.flows.collect import COLLECT_FAMILIES, collect

BUSY = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"


def test_collect_flow_on_scratch_and_read_only(prefect_server, start_redis, tmp_path):
    server = start_redis(extra_args=["--slowlog-log-slower-than", "5000"])
    app = redis.Redis(port=server.port, client_name="shop-app", protocol=2)
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {"name": "scratch-a", "url": server.url, "mode": "scratch"},
            {"name": "site-ro", "url": server.url, "mode": "read-only",
             "same_server_as": "scratch-a"},
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
            ("scratch-a", "ok"), ("site-ro", "ok"),
        ]
        runs.append(summary.run_id)

    tables = {f.parts[-4] for f in lake_dir.glob("*/env=*/date=*/*.parquet")}
    assert tables == {
        "runs", "steps", "slowlog_collections", "slowlog_entries", "latency_collections",
        "latency_latest", "latency_history", "commandstats_snapshots",
    }
    # Only the collection families ran: the experiments never touched the server.
    steps = pq.read_table(lake_dir / "steps").to_pylist()
    assert {s["family"] for s in steps} == set(COLLECT_FAMILIES)
    assert {s["status"] for s in steps} == {"ok"}
    assert {r["profile"] for r in pq.read_table(lake_dir / "runs").to_pylist()} == {"collect"}

    warehouse.build(lake_dir, tmp_path / "w.duckdb")
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    for env in ("scratch-a", "site-ro"):
        values = dict(con.execute(
            "select figure, value from figures where run_id = ? and env = ? and subject = ''",
            [runs[1], env],
        ).fetchall())
        # The first collection saw one entry, the second one more: nothing lost.
        assert values["slowlog_entries_new"] == 1
        assert values["slowlog_entries_lost"] == 0
        assert values["slowlog_collection_gap_min"] > 0
        assert values["slowlog_entries_per_min"] > 0
        assert 1 <= values["slowlog_recommended_interval_min"] <= 60
        assert values["latency_monitor_threshold_ms"] == 0  # a finding: monitor off
        assert values["server_calls_per_s"] > 0  # counters differenced across collections
    # Per-command counters between the two collections: the application's EVAL among them.
    evals = con.execute(
        "select value from figures where run_id = ? and env = 'scratch-a' "
        "and figure = 'command_calls_per_s' and subject = 'eval'", [runs[1]]
    ).fetchone()
    assert evals is not None and evals[0] > 0
