"""The whole nightly flow on one real scratch server: lake, warehouse, report."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from conftest import open_warehouse, run_nightly, write_config

pytestmark = pytest.mark.e2e


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

    con = open_warehouse(tmp_path / "warehouse.duckdb")
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


def test_one_measurement_per_host_whoever_asks(prefect_server, redis_server, tmp_path, monkeypatch):
    """The lock is the server's own (run_id), held on this machine and, with a shared Prefect
    API, as a 1-slot limit; a second holder waits and is told who holds it."""
    import threading
    import time

    from prefect.client.orchestration import get_client

    from yardstick.flows.hostlock import host_slot, lock_name
    from yardstick.host.embedded import free_port
    from yardstick.settings.config import Environment

    monkeypatch.setenv("YARDSTICK_LOCK_DIR", str(tmp_path / "locks"))
    env = Environment(name="a", url=redis_server.url, mode="read-only")
    told: list[str] = []
    entered: list[float] = []

    def second() -> None:
        with host_slot(env, "the second run", told.append):
            entered.append(time.monotonic())

    with host_slot(env, "the first run", told.append) as slot:
        assert slot.identity is not None and slot.identity.startswith("server:")
        with get_client(sync_client=True) as client:
            limit = client.read_global_concurrency_limit_by_name(lock_name(slot.identity))
            assert limit.limit == 1 and limit.active_slots == 1
        other = threading.Thread(target=second)
        other.start()
        time.sleep(1.5)
        released = time.monotonic()
    other.join(timeout=60)
    assert entered and entered[0] >= released
    assert len(told) == 1 and "the first run" in told[0] and str(os.getpid()) in told[0]

    # A server that does not answer holds nothing and says why.
    dead = Environment(name="d", url=f"redis://127.0.0.1:{free_port()}/0", mode="read-only")
    with host_slot(dead, "x", told.append) as slot:
        assert slot.identity is None and "ConnectionError" in (slot.unreachable or "")


def test_an_environment_s_servers_are_locked_once_each_in_one_order(
    start_redis, tmp_path, monkeypatch
):
    """Two runs locking the same two servers, listed in opposite orders, never wait on each
    other in a circle; a server listed twice (two members of one host) is locked once."""
    import threading
    import time

    from yardstick.flows.hostlock import host_slots
    from yardstick.settings.config import Environment

    monkeypatch.setenv("YARDSTICK_LOCK_DIR", str(tmp_path / "locks"))
    one, two = start_redis(), start_redis()
    a = Environment(name="a", url=one.url, mode="read-only")
    b = Environment(name="b", url=two.url, mode="read-only")
    a_again = Environment(name="a-again", url=one.url, mode="read-only")
    done: list[str] = []

    def run(units: list[Environment], label: str) -> None:
        for _ in range(5):
            with host_slots(units, label, lambda _: None) as slots:
                assert all(slots[u.name].identity for u in units)
                time.sleep(0.05)
        done.append(label)

    threads = [
        threading.Thread(target=run, args=([a, b, a_again], "forward")),
        threading.Thread(target=run, args=([b, a], "backward")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(done) == ["backward", "forward"]
