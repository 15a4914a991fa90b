"""Runs that share a folder (cron and a hand run) or a machine (several projects): they wait
for each other where they must, and never stop, fail or blame each other."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lakes
import pytest
from conftest import finish, start_yardstick, write_config

from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake

# Two runs of one folder: the server kind changes nothing.
pytestmark = [pytest.mark.e2e, pytest.mark.server_agnostic]


def test_two_runs_in_one_folder_both_finish_and_both_are_kept(start_redis, tmp_path):
    # Two servers, one environments file, one folder (default lake, warehouse, reports and
    # Prefect home, as cron's run and a hand run share them); the second starts 5 s later.
    servers = {"cron": start_redis(), "by-hand": start_redis()}
    config = write_config(
        tmp_path / "environments.yaml",
        [
            {
                "name": name,
                "url": server.url,
                "mode": "read-only",
                "families": ["fingerprint", "round_trip"],
            }
            for name, server in servers.items()
        ],
    )
    first = start_yardstick(tmp_path, "run", "--config", str(config), "--env", "cron",
                            "--profile", "quick")  # fmt: skip
    time.sleep(5)
    second = start_yardstick(tmp_path, "run", "--config", str(config), "--env", "by-hand",
                             "--profile", "quick")  # fmt: skip
    done = [finish(first, timeout=600), finish(second, timeout=600)]
    for result in done:
        printed = result.stdout + result.stderr
        assert result.returncode == 0, printed
        assert "Traceback" not in printed
        # Neither run was stopped, nor told the other one had been killed.
        assert "killed" not in printed and "stopped a Prefect server" not in printed, printed
    out = tmp_path / "reports-out"
    assert {"cron.md", "by-hand.md", "index.md", "comparison.md"} <= {p.name for p in out.iterdir()}
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temporary file
    landed = dict(delta.complete_runs(Lake.at(tmp_path / "lake")))
    assert set(landed) == {"cron", "by-hand"}
    con = warehouse.connect_read_only(tmp_path / "warehouse.duckdb")
    try:
        held = con.execute(
            "select env, run_id, count(*) from runs group by env, run_id order by env"
        ).fetchall()
        loaded = con.execute(
            f"select env, run_id, count(*) from {warehouse.LOADED} group by env, run_id"
        ).fetchall()
    finally:
        con.close()
    assert sorted(held) == sorted((env, run, 1) for env, run in landed.items())
    assert sorted(loaded) == sorted(held)
    # Without PREFECT_API_URL neither run started a Prefect server: no pid file, no database.
    prefect_home = tmp_path / ".yardstick" / "prefect"
    assert not list(prefect_home.glob("server*.json")) and not list(prefect_home.glob("*.db"))


def _small_lake(lake_dir: Path, env: str, at: datetime) -> str:
    """One complete run of `env` in the lake: its runs, steps and fingerprint rows."""
    run = lakes.new_run(lake_dir, env, at)
    lakes.fingerprint(run)
    lakes.steps(run, ["fingerprint"], finished_at=run.at, duration_s=0.5)
    lakes.runs_row(run, profile="quick")
    return run.run_id


def test_an_update_waits_for_a_reader_of_another_process_and_says_whom(tmp_path):
    lake_dir, path = tmp_path / "lake", tmp_path / "warehouse.duckdb"
    start = datetime(2026, 11, 1, 2, tzinfo=UTC)
    first = _small_lake(lake_dir, "alpha", start)
    assert warehouse.update(Lake.at(lake_dir), path).mode == "full"
    # Another run renders (holds a read connection) while this one's runs arrive.
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from yardstick.storage import warehouse\n"
            "con = warehouse.connect_read_only(sys.argv[1], who='run R-1')\n"
            "print('reading', flush=True)\n"
            "sys.stdin.readline()\n"
            "con.close()\n"
            "print('closed', flush=True)\n"
            "time.sleep(600)\n",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    update = None
    try:
        assert reader.stdout.readline().strip() == "reading"
        second = _small_lake(lake_dir, "alpha", start + timedelta(days=1))
        update = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import logging, sys\n"
                "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
                "from yardstick.storage import warehouse\n"
                "from yardstick.storage.lakefs import Lake\n"
                "lake = Lake.at(sys.argv[1])\n"
                "result = warehouse.update(lake, sys.argv[2], until_run_id=sys.argv[3])\n"
                "print(result.mode, result.runs_added, flush=True)\n",
                str(lake_dir),
                str(path),
                second,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        said = update.stderr.readline()
        assert said.startswith(f"waiting for run R-1 (pid {reader.pid}, reading it)"), said
        assert str(path) in said
        assert update.poll() is None  # waiting, not failing on DuckDB's file lock
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "closed"
        out, err = update.communicate(timeout=300)
        assert update.returncode == 0, err
        assert out.split() == ["incremental", "1"]
    finally:
        reader.kill()
        reader.wait()
        if update is not None and update.poll() is None:
            update.kill()
            update.wait()
    con = warehouse.connect_read_only(path)
    try:
        held = con.execute("select run_id, count(*) from runs group by run_id").fetchall()
    finally:
        con.close()
    assert sorted(held) == [(first, 1), (second, 1)]
