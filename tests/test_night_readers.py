"""Nothing that happens to the warehouse silences the night: a `duckdb -readonly` session left
open on it, or an update that fails, and the night's reports (when the warehouse can be
built) and events (always) still happen, with one line and no traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
from conftest import run_nightly, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.server_agnostic]


@contextmanager
def duckdb_cli_reading(path: Path) -> Iterator[None]:
    """The duckdb CLI holding the warehouse open read-only, as the docs suggest for exploring
    (waiting at its prompt: its stdin stays open)."""
    cli = shutil.which("duckdb", path=str(Path(sys.executable).parent))
    if cli is None:
        pytest.skip("the duckdb CLI (duckdb-cli, a test extra) is not installed")
    reader = subprocess.Popen(
        [cli, "-readonly", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        reader.stdin.write("select count(*) from marts.runs;\n")
        reader.stdin.flush()
        reader.stdout.readline()  # its answer's first line: the file is open
        with pytest.raises(duckdb.IOException, match="lock"):
            duckdb.connect(str(path)).close()  # held: no process may write it in place
        yield
    finally:
        reader.kill()
        reader.wait()


def _config(tmp_path: Path, url: str) -> Path:
    return write_config(
        tmp_path / "envs.yaml",
        [{"name": "only", "url": url, "mode": "read-only", "families": ["fingerprint"]}],
    )


def test_a_reader_holding_the_warehouse_never_silences_the_night(
    prefect_server, redis_server, tmp_path, monkeypatch
):
    emitted: list[dict] = []
    monkeypatch.setattr("yardstick.flows.announce.emit_event", lambda **spec: emitted.append(spec))
    config = _config(tmp_path, redis_server.url)
    state, _ = run_nightly(tmp_path, config_path=str(config))  # the warehouse's first build
    assert state.is_completed(), state.message
    emitted.clear()

    with duckdb_cli_reading(tmp_path / "warehouse.duckdb"):
        state, summary = run_nightly(tmp_path, config_path=str(config))
    assert state.is_completed(), state.message
    assert summary.problems == []
    assert summary.run_id in (tmp_path / "out" / "only.md").read_text()
    assert [e["payload"]["run_id"] for e in emitted] == [summary.run_id]
    assert "not_judged_because" not in emitted[0]["payload"]  # read from the warehouse


def test_a_failed_warehouse_update_still_sends_the_nights_events(
    prefect_server, redis_server, tmp_path, monkeypatch, caplog
):
    emitted: list[dict] = []
    monkeypatch.setattr("yardstick.flows.announce.emit_event", lambda **spec: emitted.append(spec))

    def broken(*args, **kwargs):
        raise duckdb.IOException("IO Error: Could not read from file: Input/output error")

    monkeypatch.setattr("yardstick.storage.warehouse.update", broken)
    state, summary = run_nightly(tmp_path, config_path=str(_config(tmp_path, redis_server.url)))
    assert state.is_failed()
    (problem,) = summary.problems
    assert problem.startswith(f"warehouse {tmp_path / 'warehouse.duckdb'}: not updated (IO Error")
    assert "Traceback" not in caplog.text
    (event,) = emitted
    assert event["event"] == "yardstick.not-judged"
    assert event["payload"]["run_id"] == summary.run_id
    assert event["payload"]["status"] == "ok"
    assert event["payload"]["not_judged_because"] == problem


def test_a_missing_sites_alert_needs_no_warehouse():
    from yardstick.flows.announce import message, outcome_events
    from yardstick.flows.outcome import EnvOutcome

    down = EnvOutcome(
        env="far",
        mode="read-only",
        status="missing",
        duration_s=0,
        window_s=0,
        error="site far: no worker started its run within 900 s",
    )
    (event,) = outcome_events([down], "20261207T010000Z-abcdef", "nightly", "warehouse: locked")
    assert event["event"] == "yardstick.missing"
    assert message(event["payload"]) == (
        "redis-yardstick: missing on far",
        "Run 20261207T010000Z-abcdef: missing: site far: no worker started its run within 900 s",
    )
