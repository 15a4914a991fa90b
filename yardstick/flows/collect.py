"""Collect flow: SLOWLOG, latency monitor and commandstats of every environment, every few
minutes. The SLOWLOG is a queue that forgets (128 entries by default): it has to be
collected, not consulted the next day. Read commands only, so read-only environments are
collected too (through the guard); nothing is built or rendered here, the nightly run
reports what the collections gathered.

It runs 288 times a day, each time in a fresh process under the worker, so it is kept cheap:
no task runs (the environments are read in plain threads inside the flow run; a task run per
environment and per family cost 4 task runs, their states, events and log lines each time
in Prefect's database), and imports that stop short of the warehouse, reports and charts."""

from __future__ import annotations

import logging
import time

from prefect import flow
from prefect.states import Failed, State
from pydantic import BaseModel

from yardstick import engine, interrupt
from yardstick.flows.hostlock import holding
from yardstick.flows.landing import land_tool_cost, run_logger
from yardstick.flows.outcome import EnvOutcome, RunEnded
from yardstick.flows.plan import FAMILIES, each_host_group, families_for, host_group_label
from yardstick.flows.targets import configured_lake, environments, sites_of
from yardstick.flows.units import measure_units
from yardstick.host import selfcost
from yardstick.settings.config import LOCAL_SITE, Environment
from yardstick.settings.profiles import Profile, SlowlogProfile, get_profile
from yardstick.storage import compaction, cursors, delta, loghealth
from yardstick.storage.lakefs import Lake
from yardstick.storage.preflight import lake_at
from yardstick.tasks.base import RunContext

# The families a collection runs (each declares itself `collected`): each reads, none changes
# the server.
COLLECT_FAMILIES = [family.name for family in FAMILIES if family.collected]
# Where a collection sends a remote site's part (a deployment without the 1-at-a-time limit
# of `collect`, which would cancel its own children).
COLLECT_SITE_DEPLOYMENT = "yardstick-collect/collect-site"
# Runs land with this profile name, which tells collections apart from measurement runs.
COLLECT_PROFILE = "collect"
# The tables a collection lands (runs and steps included), and how many landings of an
# environment pile up in a partition before they are merged with the day's small file (3:
# every 15 minutes at the 5-minute schedule; the month's big file is left to the nightly
# pass). Files bounded at every moment: docs/lake-warehouse.md.
COLLECT_TABLES = [
    "runs",
    "steps",
    selfcost.TOOL_COST,  # a few rows per collection: merged with the rest, not left to the night
    *(table for family in FAMILIES if family.collected for table in family.tables),
]
COMPACT_AFTER_FILES = 3
# How long a collection waits for a host another run is measuring, then skips it (recorded):
# well inside the 5-minute schedule, so the next collection never finds this one running.
HOST_WAIT_S = 120.0


class CollectSummary(BaseModel):
    """One collection: its run id, where it landed, and each environment's outcome."""

    run_id: str
    lake_dir: str  # the lake's URI
    wall_s: float
    outcomes: list[EnvOutcome]

    @property
    def failed(self) -> list[EnvOutcome]:
        """Environments whose collection did not complete."""
        return [o for o in self.outcomes if o.status != "ok"]


def collected_line(outcome: EnvOutcome) -> str:
    """What a collection did on one environment, in one line for the flow run's log."""
    tables = sorted((table, rows) for table, rows in outcome.landed_rows.items() if rows)
    landed = ", ".join(f"{rows} {table}" for table, rows in tables) or "nothing new"
    line = f"{outcome.env}: {outcome.status} in {outcome.duration_s:.1f} s, landed {landed}"
    return line + (f" ({outcome.error})" if outcome.error else "")


def log_info(message: str) -> None:
    """One INFO line in the flow run's log, also where the deployment keeps Prefect's own
    INFO lines out (PREFECT_LOGGING_LEVEL=WARNING in prefect.yaml: 288 runs a day)."""
    adapter = run_logger()
    if not isinstance(adapter, logging.LoggerAdapter):
        adapter.info(message)
        return
    message, kwargs = adapter.process(message, {})
    log = adapter.logger
    # handle() skips the logger's level (the handlers' own levels still apply).
    log.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, message, (), None, **kwargs))


def collect_profile(keep_slowlog_args: bool = False) -> Profile:
    """The profile a collection records (only its SLOWLOG settings are used)."""
    return get_profile("quick").model_copy(
        update={"name": COLLECT_PROFILE, "slowlog": SlowlogProfile(keep_args=keep_slowlog_args)}
    )


def collect_environment(
    env: Environment,
    profile: Profile,
    run_id: str,
    lake: Lake,
    host_group: str,
    context: RunContext,
    host_wait_s: float = HOST_WAIT_S,
) -> EnvOutcome:
    """Collect one environment (each of its servers) while holding their hosts' slots, land
    its tables; never raises for a family's failure (the step records it)."""
    # The hosts' locks, as the nightly flow takes them: a collection waits (a bounded time, so
    # that collections cannot pile up behind a long experiment) instead of reading a server
    # mid-experiment. Called plainly (no task run), retried as the task declares.
    return measure_units(
        env,
        profile,
        run_id,
        lake,
        host_group,
        context,
        lambda unit: families_for(unit, COLLECT_FAMILIES),
        f"yardstick collect {run_id}",
        run_logger().info,
        wait_s=host_wait_s,
        plain=True,
    )


def collect_context(
    envs: list[Environment],
    run_id: str,
    lake: Lake,
    server_binary: dict[str, str] | None = None,
) -> RunContext:
    """What a collection's families are given: the run's environments, and what the lake
    already holds of each (its SLOWLOG and LATENCY HISTORY cursors, read from complete runs
    when the environment's families start), so only what is new lands."""
    return RunContext(
        server_binary=server_binary,
        peers={e.name: e for e in envs},
        landed=cursors.reader(lake, run_id),
    )


def collect_environments(
    envs: list[Environment],
    profile: Profile,
    run_id: str,
    lake: Lake,
    server_binary: dict[str, str] | None = None,
) -> list[EnvOutcome]:
    """Collect every environment: one host group after another inside, groups side by side
    (threads of this flow run, not task runs); outcomes in group order."""
    context = collect_context(envs, run_id, lake, server_binary)

    def one_group(group: list[Environment]) -> list[EnvOutcome]:
        label = host_group_label(group)
        # Environments on one host run one after another: a read perturbs the next. Their
        # hosts are held once for the group (one lease, each server asked who it is once),
        # not once per environment.
        with holding(group, f"yardstick collect {run_id}", run_logger().info, HOST_WAIT_S):
            return [
                part
                for env in group
                for part in collect_environment(
                    env, profile, run_id, lake, label, context
                ).with_members()
            ]

    return each_host_group(envs, one_group, "yardstick-collect")


def send_collection(
    site: str,
    envs: list[Environment],
    config_path: str,
    lake: Lake,
    keep_slowlog_args: bool,
    compact_after_files: int,
) -> None:
    """A collection of one remote site's environments, on that site's work queue; the site's
    earlier collections no worker has started yet are cancelled (superseded: a collection
    reads what the queue holds now, so a site whose worker was down gets one, not a backlog)."""
    from prefect.deployments import run_deployment

    if not engine.orchestrated():
        run_logger().warning(
            "site %s: not collected: this run has no Prefect API to send it to (set "
            "PREFECT_API_URL to the server the sites' workers serve)",
            site,
        )
        return
    try:
        cancel_unstarted(COLLECT_SITE_DEPLOYMENT, site, "superseded by a newer collection")
        run_deployment(
            COLLECT_SITE_DEPLOYMENT,
            parameters={
                "config_path": config_path,
                "env_names": [env.name for env in envs],
                "lake_dir": lake.uri,
                "keep_slowlog_args": keep_slowlog_args,
                "compact_after_files": compact_after_files,
                "site": site,
            },
            work_queue_name=site,
            timeout=0,
        )
    except Exception as exc:  # the other sites are still collected
        run_logger().warning(
            "site %s: collection not sent to its work queue: %s", site, str(exc).splitlines()[0]
        )


def cancel_unstarted(deployment_name: str, site: str, why: str) -> int:
    """Cancel the deployment's runs on the site's work queue that no worker has started."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        WorkQueueFilter,
        WorkQueueFilterName,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled

    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(deployment_name)
        waiting = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
            work_queue_filter=WorkQueueFilter(name=WorkQueueFilterName(any_=[site])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=[StateType.SCHEDULED, StateType.PENDING])
                )
            ),
        )
        for run in waiting:
            client.set_flow_run_state(run.id, Cancelled(message=why), force=True)
    return len(waiting)


@flow(name="yardstick-collect", log_prints=True)
@selfcost.metered(by_environment=False)  # a few rows per collection, not one per environment
def collect(
    config_path: str | None = None,
    env_names: list[str] | None = None,
    lake_dir: str | None = None,
    keep_slowlog_args: bool = False,
    compact_after_files: int = COMPACT_AFTER_FILES,
    site: str | None = None,
) -> CollectSummary | State:
    """Read SLOWLOG, latency monitor and commandstats of each environment into the lake;
    merge a month's collection files once `compact_after_files` of them have piled up.

    Without `site`: the local site's environments here, every other site's sent to that
    site's work queue (a `collect-site` run each, not waited for). With `site`: that site's."""
    wall_start = time.perf_counter()
    interrupt.quiet_stop_tracebacks()
    interrupt.watch_parent()  # under a worker: stop once the worker is gone
    profile = collect_profile(keep_slowlog_args)
    run_id = delta.new_run_id()
    lake = lake_at(lake_dir or configured_lake(config_path) or "lake")
    # A lost commit that a checkpoint covers refuses every append until replaced (its log
    # alone is read here; the nightly run also adds back the files of a lost commit).
    repaired, refused = loghealth.check_and_repair(lake, files=False)
    for line in repaired + refused:
        run_logger().warning(line)
    meter = selfcost.current()  # the tool's own cost per phase, landed as `tool_cost`
    with environments(config_path, env_names) as (envs, server_binary):
        by_site = sites_of(envs)
        if site is None and config_path:
            for remote, remote_envs in by_site.items():
                if remote != LOCAL_SITE:
                    send_collection(
                        remote,
                        remote_envs,
                        config_path,
                        lake,
                        keep_slowlog_args,
                        compact_after_files,
                    )
        envs = by_site.get(site or LOCAL_SITE, [])
        # Same rule as the nightly run: one server host is read by one thing at a time.
        # One commit per table for the whole collection (runs last), not per environment.
        with delta.batch(lake, f"collection {run_id}"):
            meter.switch("measure")
            outcomes = collect_environments(envs, profile, run_id, lake, server_binary)
            meter.switch("landing")  # the batch's commit, then a merge when one is due
    if compact_after_files > 0:
        # Small files only (the new landings and the day's merged file, never the month's),
        # then the replaced files older than the readers' margin are deleted. Skipped (not
        # waited for) while the nightly run compacts or a warehouse update reads the lake.
        report = compaction.compact(
            lake,
            min_files=compact_after_files,
            tables=COLLECT_TABLES,
            small_bytes=compaction.SMALL_FILE_BYTES,
            # The members too: every node of a cluster lands its own collection files.
            envs=sorted({env.name for env in envs} | {o.env for o in outcomes}),
        )
        if report.partitions or report.files_vacuumed or report.leftovers_removed:
            run_logger().info(report.summary())
    meter.finish()
    try:  # one small commit after the batch's, its cost inside `landing`
        carrier = min((o.env for o in outcomes), default=None)
        if carrier is not None:
            land_tool_cost(meter, lake, run_id, carrier)
    except Exception as exc:  # the collection is in: this costs only the rows
        run_logger().warning("lake %s: the tool's cost not landed: %s", lake, exc)
    for outcome in outcomes:
        log_info(collected_line(outcome))
    summary = CollectSummary(
        run_id=run_id,
        lake_dir=lake.uri,
        wall_s=time.perf_counter() - wall_start,
        outcomes=outcomes,
    )
    if summary.failed:
        names = ", ".join(f"{o.env} ({o.status})" for o in summary.failed)
        message = f"environments not collected: {names}"
        return Failed(message=message, data=RunEnded(message, summary))
    return summary


if __name__ == "__main__":
    collect()
