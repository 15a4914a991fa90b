"""What the Prefect UI shows of a nightly run: its report artifacts with their charts inline
(the UI serves no file beside them), and a partial night Failed with its message, without an
engine traceback."""

from __future__ import annotations

import base64
import logging

import pytest
from conftest import run_nightly, write_config

from yardstick.flows.artifacts import for_artifact, relative_links
from yardstick.host.embedded import free_port

SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'


def test_charts_are_inlined_and_no_relative_link_is_left(tmp_path):
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "a-rtt.svg").write_bytes(SVG)
    (tmp_path / "charts" / "a-moved.svg").write_bytes(SVG)
    markdown = (
        "![round trip](charts/a-rtt.svg)\n"
        "![gone](charts/none.svg)\n"
        "| regression | x | [chart](charts/a-moved.svg) |\n"
        "see [b.md](b.md) and [the docs](https://example.org/x) and [up](#top)\n"
    )
    out = for_artifact(markdown, tmp_path)
    assert relative_links(out) == []
    inline = "data:image/svg+xml;base64," + base64.b64encode(SVG).decode()
    assert out.count(inline) == 2  # the chart, and the table's linked chart appended
    assert "*gone (chart not rendered)*" in out and "chart 1 (below)" in out
    assert "see b.md and [the docs](https://example.org/x) and [up](#top)" in out


@pytest.mark.e2e
@pytest.mark.server_agnostic
def test_a_partial_night_ends_failed_and_its_artifacts_link_nothing_relative(
    prefect_server, redis_server, tmp_path, caplog
):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "good",
                "url": redis_server.url,
                "mode": "read-only",
                "families": ["fingerprint", "round_trip"],
            },
            {"name": "dead", "url": f"redis://127.0.0.1:{free_port()}/0", "mode": "scratch"},
        ],
    )
    with caplog.at_level(logging.ERROR):
        state, summary = run_nightly(tmp_path, config_path=str(config))
    assert state.is_failed()
    assert "dead (failed)" in state.message
    # The summary still reaches the caller, and Prefect's engine logged no traceback.
    statuses = {o.env: o.status for o in summary.outcomes}
    assert statuses.keys() == {"good", "dead"} and statuses["dead"] == "failed"
    assert not [r for r in caplog.records if "Engine execution exited" in r.getMessage()]
    assert "Unexpected result for failed state" not in caplog.text

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])
            )
        )
    reports = [a for a in artifacts if a.type == "markdown"]
    assert {a.key for a in reports} >= {"yardstick-good", "yardstick-dead"}
    for artifact in reports:
        assert relative_links(artifact.data) == [], artifact.key
    good = next(a for a in reports if a.key == "yardstick-good")
    assert "](data:image/svg+xml;base64," in good.data  # its round-trip chart, inline


@pytest.mark.e2e
@pytest.mark.server_agnostic
def test_a_partial_night_under_the_engine_entrypoint_logs_no_traceback(
    prefect_server, redis_server, tmp_path
):
    """As a worker runs it (`python -m prefect.engine <id>`): the engine asks the finished run
    for its result, which raises a Failed state's data again; no traceback is logged for it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.settings import PREFECT_API_URL

    from yardstick.flows.nightly import nightly

    config = write_config(
        tmp_path / "envs.yaml",
        [
            {"name": "good", "url": redis_server.url, "mode": "read-only"},
            {"name": "dead", "url": f"redis://127.0.0.1:{free_port()}/0", "mode": "scratch"},
        ],
    )
    parameters = {
        "config_path": str(config),
        "env_names": ["good", "dead"],
        "profile": "quick",
        "lake_dir": str(tmp_path / "lake"),
        "warehouse_path": str(tmp_path / "warehouse.duckdb"),
        "out_dir": str(tmp_path / "out"),
    }
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(nightly, parameters=parameters)
    entrypoint = Path(__file__).parents[1] / "yardstick" / "flows" / "nightly.py"
    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PREFECT__FLOW_ENTRYPOINT": f"{entrypoint}:nightly",
    }
    done = subprocess.run(
        [sys.executable, "-m", "prefect.engine", str(flow_run.id)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-3000:]
    assert "Traceback" not in printed and "unexpected exception" not in printed, printed[-3000:]
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(flow_run.id).state
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id]))
        )
    assert state.is_failed() and "dead (failed)" in state.message, state
    assert logs and not [log.message for log in logs if "Traceback" in log.message]
