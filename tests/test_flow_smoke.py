"""The whole nightly flow on one real scratch server: lake, warehouse, report."""

from __future__ import annotations

import duckdb
import pyarrow.parquet as pq
from conftest import run_nightly, write_config


def test_flow_on_scratch_server(prefect_server, redis_server, tmp_path):
    config = write_config(
        tmp_path / "envs.yaml",
        [{"name": "scratch-a", "url": redis_server.url, "mode": "scratch"}],
    )
    state, summary = run_nightly(tmp_path, config_path=str(config))
    assert state.is_completed(), state.message
    assert [o.status for o in summary.outcomes] == ["ok"]

    files = sorted((tmp_path / "lake").glob("*/env=scratch-a/period=*/*.parquet"))
    spine = {"runs", "steps", "fingerprint", "ping_windows", "ping_histogram", "commandstats"}
    assert spine <= {f.parts[-4] for f in files}
    for f in files:
        table = pq.read_table(f)  # every file is readable Parquet
        if f.parts[-4] in spine:
            assert table.num_rows > 0

    con = duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True)
    natures = {
        r[0]
        for r in con.execute(
            "select nature from figures where run_id = ? and env = 'scratch-a'", [summary.run_id]
        ).fetchall()
    }
    assert natures == {"absolute", "ratio"}
    ratio = con.execute(
        "select value from figures where figure = 'client_over_server_ping'"
    ).fetchone()[0]
    assert ratio > 1  # the client always waits longer than Redis executes

    report = (tmp_path / "out" / "scratch-a.md").read_text()
    assert "The environment, before the numbers" in report
    assert "absolute (this machine only)" in report and "ratio (transfers)" in report
    assert "scratch-a.md" in (tmp_path / "out" / "index.md").read_text()


def test_one_measurement_per_host_across_flows(prefect_server):
    """The host's 1-slot limit exists and is held while an environment is measured."""
    import threading
    import time

    from prefect.client.orchestration import get_client
    from prefect.concurrency.sync import concurrency

    from yardstick.flows.hostlock import ensure_host_limits

    (name,) = ensure_host_limits(["localhost"])
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(name).limit == 1
    entered: list[float] = []

    def second() -> None:
        with concurrency(name, occupy=1, strict=True):
            entered.append(time.monotonic())

    with concurrency(name, occupy=1, strict=True):
        held_since = time.monotonic()
        other = threading.Thread(target=second)
        other.start()
        time.sleep(1.5)
        released = time.monotonic()
    other.join(timeout=60)
    assert entered and entered[0] >= released > held_since
