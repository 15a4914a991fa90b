"""Ctrl-C or SIGTERM while the warehouse is built: the build stops within seconds, one line
says what happened (not "dbt build: unknown error"), the rebuild's hidden folder is gone,
nothing is rendered or announced, and the sentence about what the next run does is true."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import finish, start_yardstick, write_config

pytestmark = pytest.mark.e2e


@pytest.mark.server_agnostic
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_while_the_warehouse_builds_is_prompt_and_said(redis_server, tmp_path, signum):
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "only",
                "url": redis_server.url,
                "mode": "read-only",
                "families": ["fingerprint"],
            }
        ],
    )
    process = start_yardstick(
        tmp_path,
        "run",
        "--config",
        str(config),
        "--profile",
        "quick",
        "--lake",
        "lake",
        "--warehouse",
        "warehouse.duckdb",
        "--out",
        "out",
        "--state-dir",
        "state",
    )
    # The first update is a rebuild in a hidden folder: once its file is there, the loader or
    # dbt is at work (both must stop the same way).
    building = tmp_path / ".warehouse.duckdb.building" / "warehouse.duckdb"
    deadline = time.monotonic() + 240
    while not building.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the warehouse build never started"
        time.sleep(0.05)
    time.sleep(1.0)
    sent = time.monotonic()
    process.send_signal(signum)
    result = finish(process, timeout=120)
    took = time.monotonic() - sent

    name = signal.Signals(signum).name
    assert result.returncode == 128 + signum, result.stdout + result.stderr
    assert took < 30, f"{name} took {took:.0f} s to stop the build"  # seconds, not a minute
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {name} received: stopped while updating the warehouse"), last
    assert "the next run updates the warehouse" in last
    assert "unknown error" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    # No leftover of the rebuild, no warehouse half built, nothing rendered.
    assert not building.parent.exists()
    assert not (tmp_path / "warehouse.duckdb").exists()
    assert not (tmp_path / "out" / "index.md").exists()
    assert not list((tmp_path / "out").glob("*.md"))
