"""`prefect deploy --all` from the repository's prefect.yaml creates the nightly deployment.

Runs the real Prefect CLI from this venv against a throwaway PREFECT_HOME and one
`prefect server start` on a free loopback port (every CLI call in ephemeral mode would
start a temporary server of its own, ~10 s each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from yardstick.host.embedded import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
PREFECT = Path(sys.executable).parent / "prefect"

FLOW_NAME = "yardstick-nightly"
DEPLOYMENT = f"{FLOW_NAME}/nightly"
COLLECT_DEPLOYMENT = "yardstick-collect/collect"
SET_WORKDIR_STEP = "prefect.deployments.steps.set_working_directory"


def _prefect_env(home: Path) -> dict[str, str]:
    # Drop every inherited PREFECT_* variable (PREFECT_API_URL, PREFECT_PROFILE, ...)
    # so the developer's own Prefect setup cannot leak into the test.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_CLI_PROMPT="false",
        # Ephemeral mode is on in Prefect's default profile; pin it anyway.
        PREFECT_SERVER_EPHEMERAL_ENABLED="true",
        # The first call runs the database migrations; leave room on slow machines.
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90",
        # Client-side telemetry off.
        DO_NOT_TRACK="1",
        # prefect.yaml's pull step uses {{ $PWD }}, which `prefect deploy` reads from
        # the environment. subprocess(cwd=...) does not update PWD, so set it.
        PWD=str(REPO),
    )
    return env


@contextmanager
def _prefect_server(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A real Prefect server on a free port; yields the environment that points at it."""
    port = free_port()
    server = subprocess.Popen(
        [str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    api_url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, "prefect server start exited"
            try:
                with urllib.request.urlopen(f"{api_url}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "prefect server did not answer in 120 s"
                time.sleep(0.5)
        yield {**env, "PREFECT_API_URL": api_url}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _prefect(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(PREFECT), "--no-prompt", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"`prefect {' '.join(args)}` exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    return result


def _read_deployment(env: dict[str, str], name: str) -> dict:
    """What `prefect deployment inspect <name> --output json` prints (the deployment's
    model_dump), read by this process's client: a CLI process per deployment costs seconds."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            return client.read_deployment_by_name(name).model_dump(mode="json")


def test_prefect_deploy_all_creates_nightly_deployment(tmp_path: Path) -> None:
    assert PREFECT.exists(), f"prefect CLI not found next to {sys.executable}"
    assert (REPO / "prefect.yaml").is_file()
    assert (REPO / "yardstick" / "flows" / "nightly.py").is_file(), (
        "yardstick/flows/nightly.py is missing"
    )

    with _prefect_server(_prefect_env(tmp_path / "prefect-home")) as env:
        _deploy_and_inspect(env)


def _deploy_and_inspect(env: dict[str, str]) -> None:
    # `prefect deploy` refuses (exit 1) when the work pool does not exist yet.
    _prefect(env, "work-pool", "create", "yardstick", "--type", "process", "--overwrite")
    _prefect(env, "work-pool", "create", "yardstick-sites", "--type", "process", "--overwrite")
    deploy = _prefect(env, "deploy", "--all")
    assert DEPLOYMENT in deploy.stdout

    inspect = _prefect(env, "deployment", "inspect", DEPLOYMENT, "--output", "json")
    deployment = json.loads(inspect.stdout)

    assert deployment["name"] == "nightly"
    assert deployment["entrypoint"] == "yardstick/flows/nightly.py:nightly"
    assert deployment["work_pool_name"] == "yardstick"
    assert deployment["parameters"] == {
        "config_path": "environments.yaml",
        "profile": "nightly",
        "detail_days": 30,
    }
    assert {"config_path", "profile"} <= set(deployment["parameter_openapi_schema"]["properties"])

    schedules = [s["schedule"] for s in deployment["schedules"] if s["active"]]
    assert len(schedules) == 1, deployment["schedules"]
    assert schedules[0]["cron"] == "0 2 * * *"
    assert schedules[0]["timezone"] == "UTC"

    # The worker must run the code in place, in this repository.
    assert deployment["pull_steps"] == [{SET_WORKDIR_STEP: {"directory": str(REPO)}}]

    # Beside it, the SLOWLOG collection every five minutes (the queue forgets).
    assert COLLECT_DEPLOYMENT in deploy.stdout
    # The nightly's was read by the CLI, as a user reads it; the others through the client,
    # which reads what the CLI prints (the CLI adds the deployment's automations).
    by_client = _read_deployment(env, DEPLOYMENT)
    assert by_client == {k: v for k, v in deployment.items() if k in by_client}
    collect = _read_deployment(env, COLLECT_DEPLOYMENT)
    assert collect["entrypoint"] == "yardstick/flows/collect.py:collect"
    assert collect["work_pool_name"] == "yardstick"
    assert collect["parameters"] == {"config_path": "environments.yaml"}
    collect_schedules = [s["schedule"] for s in collect["schedules"] if s["active"]]
    assert [(s["cron"], s["timezone"]) for s in collect_schedules] == [("*/5 * * * *", "UTC")]
    assert collect["pull_steps"] == [{SET_WORKDIR_STEP: {"directory": str(REPO)}}]
    # Collections never pile up behind a nightly run holding the host: one at a time.
    assert collect["global_concurrency_limit"]["limit"] == 1
    assert collect["concurrency_options"]["collision_strategy"] == "CANCEL_NEW"
    # A site's parts are on the sites' pool: the hub's `prefect worker start --pool yardstick`
    # (every queue of its own pool) never takes them; a site's worker polls its queue there.
    for name in ("yardstick-measure-site/measure-site", "yardstick-collect/collect-site"):
        site = _read_deployment(env, name)
        assert site["work_pool_name"] == "yardstick-sites", site["work_pool_name"]
        assert not site["schedules"]
    for name in (DEPLOYMENT, COLLECT_DEPLOYMENT, "yardstick-prune/prune"):
        hub = _read_deployment(env, name)
        assert hub["work_pool_name"] == "yardstick", name
