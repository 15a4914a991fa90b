"""What an operator sees on a terminal during `yardstick run`: a line per environment with
its current family, the log lines above it (never mixed into one), no telemetry notice and no
link to a Prefect server (a one-shot run starts none)."""

from __future__ import annotations

import fcntl
import io
import logging
import os
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import pyte
import pytest
from conftest import YARDSTICK, run_paths, write_config
from rich.console import Console

from yardstick.app.progress import (
    EnvLine,
    RunProgress,
    expected_durations,
    shared_console_logging,
    split_label,
)
from yardstick.engine import PlainRun

COLUMNS, ROWS = 140, 40
SPINNER = set("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _run_in_a_terminal(cwd: Path, *args: str, timeout_s: float = 240):
    """Run `yardstick` on a pseudo-terminal; return (exit code, snapshots of the screen taken
    while it ran, the final screen), each screen a list of lines."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(TERM="xterm-256color", COLUMNS=str(COLUMNS), LINES=str(ROWS))
    env.pop("DO_NOT_TRACK", None)  # the CLI itself must opt out
    env.pop("CI", None)  # Prefect shows its notice only outside CI
    # A user Prefect never met (no ~/.prefect): the one its first-run notice is shown to.
    env["HOME"] = str(cwd / "home")
    (cwd / "home").mkdir(exist_ok=True)
    process = subprocess.Popen(
        [str(YARDSTICK), *args],
        cwd=cwd,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    # Tall enough that nothing scrolls off: every line ever printed stays on the screen.
    screen = pyte.Screen(COLUMNS, 2000)
    stream = pyte.ByteStream(screen)
    snapshots: list[list[str]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the terminal closed: the process is gone
                    break
                if not data:
                    break
                stream.feed(data)
                snapshots.append([line.rstrip() for line in screen.display if line.strip()])
            elif process.poll() is not None:
                break
        else:
            process.kill()
            pytest.fail(f"yardstick {' '.join(args)} ran over {timeout_s} s")
        code = process.wait(timeout=30)
    finally:
        os.close(master)
    return code, snapshots, [line.rstrip() for line in screen.display if line.strip()]


@pytest.mark.e2e
@pytest.mark.server_agnostic
def test_a_run_on_a_terminal_shows_each_environment_and_its_family(redis_server, tmp_path):
    names = ["alpha", "beta"]
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": name,
                "url": redis_server.url,
                "mode": "read-only",
                "families": ["fingerprint", "round_trip", "slowlog"],
            }
            for name in names
        ],
    )
    code, snapshots, final = _run_in_a_terminal(
        tmp_path,
        "run",
        "--config",
        str(config),
        "--profile",
        "quick",
        "--verbose",  # Prefect's INFO lines too: they are printed while the lines show
        *run_paths(tmp_path),
    )
    assert code == 0, "\n".join(final)
    # While it ran, each environment's line named a family it was measuring.
    families = {"fingerprint", "round-trip", "slowlog"}
    seen = {
        (name, family)
        for screen in snapshots
        for line in screen
        if "families done" in line
        for name in names
        if re.search(rf"\b{name}\b", line)
        for family in families
        if family in line
    }
    assert {name for name, _ in seen} == set(names), seen
    logs = [line for line in final if LOG_LINE.match(line)]
    assert logs, "\n".join(final)
    for line in logs:
        # A log line holds nothing of the live lines (spinner, counts) glued to it.
        assert not SPINNER & set(line) and "families done" not in line, line
    # Steps carry their environment (no Prefect API: plain steps, no task runs, no server).
    assert any("Step round-trip[alpha]: completed" in line for line in logs), "\n".join(logs)
    text = "\n".join(final)
    assert "View at http://127.0.0.1" not in text
    assert "anonymous usage data" not in text  # Prefect's telemetry notice
    # The next run's ETA: the families' durations, read from this run's warehouse.
    expected = expected_durations(tmp_path / "w.duckdb", "quick")
    assert expected[("alpha", "round_trip")] > 0 and expected[("", "slowlog")] >= 0
    # The live lines are gone at the end; the summary table stays.
    assert not any("families done" in line for line in final), text
    assert any("alpha" in line and "ok" in line for line in final)


def test_prefect_log_lines_go_through_the_shared_console_warning_and_up_unless_verbose():
    import prefect  # noqa: F401 (its logging configuration)

    out = io.StringIO()
    console = Console(file=out, width=200)
    logger = logging.getLogger("prefect.yardstick-test")
    for verbose in (False, True):
        out.truncate(0)
        out.seek(0)
        with shared_console_logging(console, verbose):
            logger.info("an info line")
            logger.warning("a warning line")
        text = out.getvalue()
        assert "a warning line" in text
        assert ("an info line" in text) is verbose
    logger.warning("after")  # restored: back to Prefect's own console
    assert "after" not in out.getvalue()


def test_lines_count_families_of_an_environment_and_its_nodes():
    assert split_label("throughput[scratch-a]") == ("throughput", "scratch-a")
    assert split_label("measure-environment[a[b]]") == ("measure-environment", "a[b]")
    assert split_label("compact-lake") is None
    console = Console(file=io.StringIO(), force_terminal=False)
    plans = {"c": ["fingerprint", "round-trip", "slowlog"]}
    expected = {("c", "round-trip"): 30.0, ("", "slowlog"): 10.0, ("", "fingerprint"): 1.0}
    progress = RunProgress(console, "run-x", plans, expected)
    progress.update(
        [
            PlainRun("measure-environment[c]", "RUNNING", time.time()),
            PlainRun("fingerprint[c]", "COMPLETED", time.time()),
            PlainRun("fingerprint[c.127.0.0.1_7001]", "COMPLETED", time.time()),  # a node of c
            PlainRun("round-trip[c]", "RUNNING", time.time()),
            PlainRun("measure-environment[d]", "PENDING", time.time()),
        ]
    )
    line = progress.lines["c"]
    assert line.state == "running" and line.current == "round-trip"
    assert line.text(time.monotonic()).startswith("round-trip · 1 of 3 families done · ETA 0:")
    assert progress.lines["d"].text(time.monotonic()) == "waiting · 0 families done"
    assert EnvLine("e", families=["x"]).eta_s(0.0) is None  # no history: no ETA


def test_the_eta_follows_tonights_pace_and_says_when_a_family_runs_late():
    now = time.monotonic()
    usual = {"a": 10.0, "b": 10.0, "c": 10.0}
    line = EnvLine("e", planned=3, state="running", families=["a", "b", "c"], expected_s=usual)
    # a took 30 s where it usually takes 10 (a loaded night): b and c will be as slow. An ETA
    # from the medians alone said 0:10 here (38 % low on a long environment).
    line.running_since, line.done = now - 40, {"a"}
    line.current, line.current_since = "b", now - 10
    assert line.eta_s(now) == pytest.approx(50.0)
    # b runs past its usual time at that pace: the ETA is a floor and the line says by how
    # much, moving every second (it once stood at "ETA 0:51" for 4 minutes).
    line.running_since, line.current_since = now - 75, now - 45
    first, later = line.text(now), line.text(now + 30)
    assert first == "b · 1 of 3 families done · ETA ≥ 0:30 (+0:15 over its usual)"
    assert later == "b · 1 of 3 families done · ETA ≥ 0:30 (+0:45 over its usual)"


def test_a_waiting_line_says_for_whom_and_the_warehouse_build_shows():
    console = Console(file=io.StringIO(), force_terminal=False)
    plans = {"a": ["fingerprint"], "b": ["fingerprint"], "c": ["fingerprint"], "d": ["fingerprint"]}
    groups = {"a": "h1", "b": "h1", "c": "h2", "d": "h3"}
    progress = RunProgress(console, "run-x", plans, {}, groups=groups, max_groups=2)
    progress.update(
        [
            PlainRun("measure-environment[a]", "RUNNING", time.time()),
            PlainRun("measure-environment[c]", "RUNNING", time.time()),
            PlainRun("fingerprint[c]", "RUNNING", time.time()),
        ]
    )
    now = time.monotonic()
    assert progress.lines["b"].text(now) == "waiting for a (same host) · 0 of 1 families done"
    assert progress.lines["d"].text(now) == (
        "waiting for a free slot (2 hosts measured at a time) · 0 of 1 families done"
    )
    # a started but measures nothing: its host's lock is held by another run, named.
    progress.lock_wait("waiting for run R-1 (pid 12) that holds host h1 since 02:00:01 UTC")
    progress.update([PlainRun("measure-environment[a]", "RUNNING", time.time())])
    assert (
        progress.lines["a"]
        .text(time.monotonic())
        .startswith("waiting for run R-1 (pid 12) that holds host h1 since 02:00:01 UTC · 0 of 1")
    )
    # After the measurements, the warehouse build has a line of its own with its time.
    progress.update([PlainRun("update-warehouse", "RUNNING", time.time() - 42)])
    shown = {task.description: task.fields["detail"] for task in progress._progress.tasks}
    assert shown["warehouse"].startswith("building the warehouse… 0:4"), shown
