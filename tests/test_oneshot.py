"""A one-shot `yardstick run` / `collect`: without a Prefect API the same flow code runs plainly
and no Prefect server is started; with one, the run is a flow run whose task runs are recorded
there (yardstick/engine.py)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import YARDSTICK, finish, run_paths, start_yardstick, write_config

from yardstick import engine
from yardstick.storage import delta
from yardstick.storage.lakefs import Lake

pytestmark = [pytest.mark.e2e, pytest.mark.server_agnostic]


def _prefect_servers_in(folder: Path) -> set[int]:
    """Pids of the processes serving a Prefect API whose working folder is `folder` (what a
    command started there would start; other tests' servers run elsewhere)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if b"prefect" not in command or b"server" not in command:
                continue
            if (entry / "cwd").resolve() == folder.resolve():
                found.add(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


def test_run_and_collect_without_an_api_start_no_prefect_server(redis_server, tmp_path):
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "plain",
                "url": redis_server.url,
                "mode": "read-only",
                "families": ["fingerprint", "round_trip", "slowlog"],
            }
        ],
    )
    seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        """Every Prefect server started in the test's folder while the commands run."""
        while not stop.wait(0.1):
            seen.update(_prefect_servers_in(tmp_path))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        ran = finish(
            start_yardstick(
                tmp_path, "run", "--config", str(config), "--profile", "quick", "--verbose",
                *run_paths(tmp_path),
            ),
            timeout=300,
        )  # fmt: skip
        collected = finish(
            start_yardstick(
                tmp_path, "collect", "--config", str(config), "--lake", str(tmp_path / "lake"),
                "--state-dir", str(tmp_path / "state"),
            )
        )  # fmt: skip
    finally:
        stop.set()
        watcher.join()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert not seen, f"Prefect servers started: {seen}"
    assert not list((tmp_path / "state").rglob("*.db")), "a Prefect database was created"
    # The same flow code measured and landed: both runs are complete in the lake.
    assert (
        len([r for env, r in delta.complete_runs(Lake.at(tmp_path / "lake")) if env == "plain"])
        >= 1
    )
    assert (tmp_path / "out" / "plain.md").is_file()
    # --verbose prints each step as the terminal's lines read it.
    assert "Step round-trip[plain]: completed" in ran.stderr, ran.stderr


def test_a_configured_api_records_the_runs_task_runs(prefect_server, redis_server, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.settings import PREFECT_API_URL

    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "recorded",
                "url": redis_server.url,
                "mode": "read-only",
                "families": ["fingerprint"],
            }
        ],
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    started = time.time()
    ran = subprocess.run(
        [str(YARDSTICK), "run", "--config", str(config), "--profile", "quick",
         *run_paths(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with get_client(sync_client=True) as client:
        flows = [
            run
            for run in client.read_flow_runs()
            if run.name.startswith("yardstick-nightly-")
            and run.start_time
            and run.start_time.timestamp() >= started - 1
        ]
        assert len(flows) == 1, [run.name for run in flows]
        task_runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[flows[0].name]))
        )
    names = {run.name for run in task_runs}
    assert {"measure-environment[recorded]", "fingerprint[recorded]"} <= names, names
    assert "update-warehouse" in {name.rsplit("-", 1)[0] for name in names}


def test_a_step_outside_a_flow_run_is_a_plain_call():
    from prefect import task

    @task(name="double")
    def double(x: int) -> int:
        return 2 * x

    assert not engine.orchestrated()
    engine.journal.clear()
    assert engine.call(double, 21, name="double[x]") == 42
    assert [(run.name, run.state) for run in engine.journal.runs()] == [("double[x]", "COMPLETED")]
