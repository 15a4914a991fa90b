"""Prune flow: keep Prefect's own database bounded under the 5-minute collection schedule.

Deletes the yardstick flows' runs older than `keep_days` through Prefect's API. The server
cascades a flow run's deletion to its task runs, their states and its own states (foreign
keys with ON DELETE CASCADE, SQLite's enforced by `PRAGMA foreign_keys = ON`) and queues the
deletion of its logs (a background job of the server). Artifacts do not go with the run:
they are deleted here, except the latest version of each `yardstick-*` key (the newest
report stays in the UI, and the run that holds it stays too). Events are not reachable
through the API; the server trims them itself (PREFECT_SERVER_EVENTS_RETENTION_PERIOD).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterEndTime,
    FlowRunFilterExpectedStartTime,
    FlowRunFilterId,
    FlowRunFilterState,
    FlowRunFilterStateType,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.objects import StateType
from prefect.exceptions import ObjectNotFound
from pydantic import BaseModel

# The flows whose runs are pruned: every flow prefect.yaml deploys (tests/test_fail_early.py
# ties the two); flows of other projects on the same server are left alone. The site flow
# (yardstick/flows/sites.py SITE_FLOW) is named here, not imported: prune must stay a light import.
YARDSTICK_FLOWS = [
    "yardstick-collect",  # collect and collect-site
    "yardstick-measure-site",
    "yardstick-nightly",
    "yardstick-prune",
]
# Keys of the artifacts the nightly flow publishes (SQL LIKE pattern).
ARTIFACT_KEYS = "yardstick-%"
# Rows per API page (the server's default and maximum limit is 200).
PAGE = 200
FINISHED = [StateType.COMPLETED, StateType.FAILED, StateType.CANCELLED, StateType.CRASHED]


class PruneSummary(BaseModel):
    """What one prune deleted, and the cut-off it used."""

    cutoff: datetime
    flow_runs: int
    task_runs: int
    logs: int
    artifacts: int


def _pages(read, page: int = PAGE) -> int:
    """Count the items `read(offset, limit)` returns, page by page."""
    total = offset = 0
    while True:
        items = read(offset, page)
        total += len(items)
        if len(items) < page:
            return total
        offset += page


def _count_task_runs(client: SyncPrefectClient, run_ids: list[UUID]) -> int:
    """Task runs of these flow runs (the server's count endpoint: no rows transferred)."""
    body = {"flow_runs": FlowRunFilter(id=FlowRunFilterId(any_=run_ids)).model_dump(mode="json")}
    return int(client.request("POST", "/task_runs/count", json=body).json())


def _delete_artifacts(client: SyncPrefectClient, run_ids: list[UUID]) -> int:
    """Delete the artifacts these flow runs created; return how many."""
    deleted = 0
    artifact_filter = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=run_ids))
    while artifacts := client.read_artifacts(artifact_filter=artifact_filter, limit=PAGE):
        for artifact in artifacts:
            try:
                client.delete_artifact(artifact.id)
                deleted += 1
            except ObjectNotFound:
                pass  # deleted meanwhile
        if len(artifacts) < PAGE:
            break
    return deleted


def _runs_holding_latest_artifacts(client: SyncPrefectClient) -> list[UUID]:
    """Flow runs that created the latest version of a yardstick artifact key."""
    latest = client.read_latest_artifacts(
        artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=ARTIFACT_KEYS)), limit=PAGE
    )
    return sorted({a.flow_run_id for a in latest if a.flow_run_id is not None})


@flow(name="yardstick-prune", log_prints=True)
def prune(keep_days: float = 14, flow_names: list[str] | None = None) -> PruneSummary:
    """Delete the yardstick flows' runs (with their task runs, logs and artifacts) older than
    keep_days; finished runs by end time, never-started ones by scheduled start."""
    if keep_days < 0:
        raise ValueError(f"keep_days must be 0 or more, not {keep_days}")
    logger = get_run_logger()
    cutoff = datetime.now(UTC) - timedelta(days=keep_days)
    counts = {"flow_runs": 0, "task_runs": 0, "logs": 0, "artifacts": 0}
    with get_client(sync_client=True) as client:
        keep = _runs_holding_latest_artifacts(client)
        flows = FlowFilter(name=FlowFilterName(any_=flow_names or YARDSTICK_FLOWS))
        not_kept = {"id": FlowRunFilterId(not_any_=keep)} if keep else {}
        old = [
            # Finished before the cut-off.
            FlowRunFilter(
                **not_kept,
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=FINISHED)),
                end_time=FlowRunFilterEndTime(before_=cutoff),
            ),
            # Scheduled for before the cut-off and never started (late runs of a stopped
            # worker): they would never run now, and pile up 288 a day.
            FlowRunFilter(
                **not_kept,
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                expected_start_time=FlowRunFilterExpectedStartTime(before_=cutoff),
            ),
        ]
        attempted: set[UUID] = set()
        for run_filter in old:
            while True:
                runs = client.read_flow_runs(
                    flow_filter=flows, flow_run_filter=run_filter, limit=PAGE
                )
                run_ids = [r.id for r in runs if r.id not in attempted]
                if not run_ids:
                    break  # nothing left, or only runs the server would not delete
                attempted.update(run_ids)
                # Counted before the runs go: afterwards nothing points at them.
                counts["task_runs"] += _count_task_runs(client, run_ids)
                log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=run_ids))
                counts["logs"] += _pages(
                    lambda offset, limit, f=log_filter: client.read_logs(
                        log_filter=f, offset=offset, limit=limit
                    )
                )
                counts["artifacts"] += _delete_artifacts(client, run_ids)
                for run_id in run_ids:
                    try:
                        client.delete_flow_run(run_id)
                        counts["flow_runs"] += 1
                    except ObjectNotFound:
                        pass  # deleted meanwhile
    since = cutoff.isoformat(timespec="seconds")
    logger.info("flow runs: %d deleted (older than %s)", counts["flow_runs"], since)
    logger.info("task runs: %d deleted with their flow runs", counts["task_runs"])
    logger.info("logs: %d queued for deletion by the server", counts["logs"])
    logger.info("artifacts: %d deleted (latest of each key kept)", counts["artifacts"])
    return PruneSummary(cutoff=cutoff, **counts)


if __name__ == "__main__":
    prune()
