"""What the yardstick flows leave in Prefect's database: a collection creates its flow run and
no task run; a failing environment still fails the run; `prune` deletes old runs with their
task runs, logs and artifacts, and leaves newer runs, other flows and the latest report."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pyarrow.parquet as pq
import pytest
from conftest import write_config
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.states import Scheduled

from yardstick.flows.collect import COLLECT_FAMILIES, COLLECT_TABLES, collect
from yardstick.flows.prune import prune

# The servers here only produce runs: what is tested is Prefect's database.
pytestmark = pytest.mark.server_agnostic
pytestmark = [pytestmark, pytest.mark.e2e]

# Collections may create this many task runs (none: the environments are plain threads).
MAX_TASK_RUNS_PER_COLLECTION = 0
PRUNE_TEST_FLOW = "yardstick-prune-test"
OTHER_FLOW = "someone-elses-flow"


@task(name="footprint-noop", cache_policy=NO_CACHE)
def noop() -> int:
    """A task whose run the server must record."""
    return 1


@flow(name="footprint-control")
def control() -> int:
    """One task run: once it is visible, the server has caught up with earlier events."""
    return noop()


def wait_for(read: Callable[[], int], want: Callable[[int], bool], timeout_s: float = 20) -> int:
    """Poll `read` until `want` holds for its value (server writes are asynchronous)."""
    deadline = time.monotonic() + timeout_s
    value = read()
    while not want(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = read()
    return value


def task_runs_of(run_id: UUID) -> int:
    """Task runs the server holds for one flow run."""
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
        )
    return len(runs)


def flow_run_exists(run_id: UUID) -> bool:
    """Whether the server still holds this flow run."""
    with get_client(sync_client=True) as client:
        found = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
        )
    return bool(found)


def logs_of(run_id: UUID) -> int:
    """Log rows the server holds for one flow run."""
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
    return len(logs)


def artifacts_of(run_id: UUID) -> int:
    """Artifacts the server holds for one flow run."""
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    return len(found)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_collection_is_what_the_families_declare():
    """The read-only collection families, in plan order, and exactly the tables they land."""
    assert COLLECT_FAMILIES == ["topology", "counters", "latency_monitor", "slowlog"]
    assert set(COLLECT_TABLES) == {
        "runs",
        "steps",
        "tool_cost",
        "commandstats_snapshots",
        "latency_collections",
        "latency_latest",
        "latency_history",
        "slowlog_collections",
        "slowlog_entries",
        "topology",
        "topology_nodes",
    }


def test_collection_of_two_environments_creates_no_task_run(prefect_server, start_redis, tmp_path):
    server = start_redis()
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {"name": "one", "url": server.url, "mode": "scratch"},
            {"name": "two", "url": server.url, "mode": "read-only"},
        ],
    )
    lake_dir = tmp_path / "lake"
    state = collect(config_path=str(config), lake_dir=str(lake_dir), return_state=True)
    assert state.is_completed(), state.message
    run_id = state.state_details.flow_run_id
    assert [(o.env, o.status) for o in state.result().outcomes] == [("one", "ok"), ("two", "ok")]

    # Task runs reach the database through events; once the control flow's task run is
    # there, the collection's would be too.
    control_id = control(return_state=True).state_details.flow_run_id
    assert wait_for(lambda: task_runs_of(control_id), lambda n: n >= 1) == 1
    assert task_runs_of(run_id) <= MAX_TASK_RUNS_PER_COLLECTION

    # One host: the two environments were read one after another, never side by side.
    runs = sorted(pq.read_table(lake_dir / "runs").to_pylist(), key=lambda r: r["started_at"])
    assert [r["env"] for r in runs] == ["one", "two"]
    assert runs[0]["finished_at"] <= runs[1]["started_at"]
    assert {r["host_group"] for r in runs} == {"localhost"}


def test_collection_with_an_unreachable_environment_fails_the_run(
    prefect_server, start_redis, tmp_path, caplog
):
    server = start_redis()
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {"name": "gone", "url": f"redis://127.0.0.1:{closed_port()}/0", "mode": "read-only"},
            {"name": "here", "url": server.url, "mode": "read-only"},
        ],
    )
    lake_dir = tmp_path / "lake"
    state = collect(config_path=str(config), lake_dir=str(lake_dir), return_state=True)
    assert state.is_failed()
    assert "gone (failed)" in state.message
    summary = state.result(raise_on_failure=False)
    outcomes = {o.env: o for o in summary.outcomes}
    assert outcomes["here"].status == "ok"
    assert outcomes["gone"].status == "failed"
    steps = {(s["env"], s["family"]): s for s in pq.read_table(lake_dir / "steps").to_pylist()}
    # The host lock asks the server who it is first: that fails, and no family is attempted.
    assert steps[("gone", "connect")]["status"] == "failed"
    assert "ConnectionError" in steps[("gone", "connect")]["reason"]
    for family in ("slowlog", "latency_monitor", "counters"):
        assert steps[("gone", family)]["status"] == "skipped"
        assert "unreachable" in steps[("gone", family)]["reason"]
    assert {s["status"] for (env, _), s in steps.items() if env == "here"} == {"ok"}
    # The failure is a warning of the flow run; nothing is logged per healthy environment.
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(m.startswith("gone: not measured: ConnectionError") for m in warnings), warnings
    assert not any(m.startswith("here") for m in warnings)


@flow(name=PRUNE_TEST_FLOW)
def fake_run(artifact_key: str | None = None) -> None:
    """A run with a task run, a log row and artifacts, as a nightly run has."""
    noop()
    get_run_logger().warning("a log row that prune must take away")
    create_markdown_artifact(markdown="unkeyed", description="no key")
    if artifact_key:
        create_markdown_artifact(markdown=f"report {datetime.now()}", key=artifact_key)


@flow(name=OTHER_FLOW)
def other_run() -> None:
    """A run of a flow prune must leave alone."""
    noop()


def test_prune_deletes_old_runs_with_task_runs_logs_and_artifacts(prefect_server):
    old = fake_run(artifact_key="yardstick-prune-test", return_state=True)
    holder = fake_run(artifact_key="yardstick-prune-solo", return_state=True)
    other = other_run(return_state=True)
    old_id, holder_id, other_id = (s.state_details.flow_run_id for s in (old, holder, other))
    with get_client(sync_client=True) as client:
        # A run scheduled a day ago that no worker ever started (a "Late" run).
        late_id = client.create_flow_run(
            fake_run, state=Scheduled(scheduled_time=datetime.now(UTC) - timedelta(days=1))
        ).id
    time.sleep(2.0)
    new_id = fake_run(artifact_key="yardstick-prune-test", return_state=True)
    new_id = new_id.state_details.flow_run_id
    for run_id in (old_id, holder_id, other_id, new_id):
        assert wait_for(lambda r=run_id: task_runs_of(r), lambda n: n >= 1) == 1
    assert wait_for(lambda: logs_of(old_id), lambda n: n >= 1) >= 1
    assert artifacts_of(old_id) == 2

    with get_client(sync_client=True) as client:
        new_end = client.read_flow_run(new_id).end_time
    # Keep what ended in the last (now - new run's end + 1 s): the new run, not the old ones.
    keep_s = (datetime.now(new_end.tzinfo) - new_end).total_seconds() + 1.0
    summary = prune(keep_days=keep_s / 86400, flow_names=[PRUNE_TEST_FLOW])
    assert (summary.flow_runs, summary.task_runs, summary.artifacts) == (2, 1, 2)
    assert summary.logs >= 1

    assert not flow_run_exists(old_id) and not flow_run_exists(late_id)
    assert task_runs_of(old_id) == 0  # cascaded with the flow run
    assert artifacts_of(old_id) == 0
    assert wait_for(lambda: logs_of(old_id), lambda n: n == 0) == 0  # a server job, soon after
    # Newer runs, other flows and the run holding the only version of a key all stay.
    for run_id in (new_id, holder_id, other_id):
        assert flow_run_exists(run_id)
    assert task_runs_of(new_id) == 1 and artifacts_of(new_id) == 2

    # keep_days=0: every finished run of the flow goes, except those holding a latest report.
    plain_id = fake_run(return_state=True).state_details.flow_run_id
    assert wait_for(lambda: task_runs_of(plain_id), lambda n: n >= 1) == 1
    summary = prune(keep_days=0, flow_names=[PRUNE_TEST_FLOW])
    assert (summary.flow_runs, summary.artifacts) == (1, 1)
    assert not flow_run_exists(plain_id)
    for run_id in (new_id, holder_id, other_id):
        assert flow_run_exists(run_id)
