"""Many sites: each environment is measured from its own site (a network, a region) by a Prefect
worker there. The nightly run measures `local` environments itself, sends every other site's
to that site's work queue of the `yardstick-sites` pool as a run of the `measure-site`
deployment, and waits for them (or gives up on them) before it builds and reports once."""

from __future__ import annotations

import time
from dataclasses import dataclass

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.context import FlowRunContext
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.states import Cancelled

from yardstick import __version__, engine, interrupt
from yardstick.flows.landing import land_tool_cost, run_logger
from yardstick.flows.outcome import EnvOutcome
from yardstick.flows.plan import host_group_label
from yardstick.flows.targets import check_secrets, environments
from yardstick.host import selfcost
from yardstick.settings.config import LOCAL_SITE, Environment
from yardstick.settings.profiles import get_profile
from yardstick.storage import delta
from yardstick.storage.lakefs import Lake
from yardstick.storage.preflight import lake_at
from yardstick.storage.schemas import to_table
from yardstick.tasks.base import utc_now

SITE_FLOW = "yardstick-measure-site"
SITE_DEPLOYMENT = f"{SITE_FLOW}/measure-site"
# The sites' own work pool (prefect.yaml): one queue per site, polled by that site's worker
# only. The hub's worker polls the `yardstick` pool, every queue of it, never this one.
SITE_POOL = "yardstick-sites"
# A site whose run no worker has started after this long has no worker up (docs/sites.md).
START_TIMEOUT_S = 900.0
# A site's whole measurement, once started (a nightly run of several environments).
SITE_TIMEOUT_S = 4 * 3600.0
POLL_S = 2.0


@flow(name=SITE_FLOW, log_prints=True)
@selfcost.metered()
def measure_site(
    site: str,
    run_id: str,
    lake_dir: str,
    config_path: str,
    profile: str = "nightly",
    env_names: list[str] | None = None,
) -> list[dict]:
    """Measure this site's environments of a nightly run and land them under the nightly's
    run id; the nightly run builds and reports (one run of it per site, on that site's queue)."""
    from yardstick.flows.measure import measure_environments

    interrupt.quiet_stop_tracebacks()
    interrupt.watch_parent()
    check_own_queue(site)
    chosen = get_profile(profile)
    lake = lake_at(lake_dir)
    with environments(config_path, env_names) as (envs, server_binary):
        mine = [env for env in envs if env.site == site]
        if not mine:
            run_logger().warning("site %s: no environment of this run is at this site", site)
            return []
        # This site's secrets live here: an unset one stops the part before any server.
        check_secrets(mine, config_path)
        meter = selfcost.current()  # this site's process: its own rows (its host and pid)
        meter.switch("measure")
        outcomes = measure_environments(mine, chosen, run_id, lake, server_binary)
        meter.switch(None)
    meter.finish()
    try:
        land_tool_cost(meter, lake, run_id, min(o.env for o in outcomes))
    except Exception as exc:  # the measurements are in: this costs only the rows
        run_logger().warning("lake %s: the tool's cost not landed: %s", lake, exc)
    return [outcome.model_dump() for outcome in outcomes]


def worker_command(site: str) -> str:
    """The command that starts a site's worker (docs/sites.md)."""
    return f"prefect worker start --pool {SITE_POOL} --work-queue {site}"


def check_own_queue(site: str) -> None:
    """Refuse to measure a site's environments from a flow run that a worker took from
    another work queue: the run rows say `site`, so it must be where they were measured."""
    context = FlowRunContext.get()
    run = context.flow_run if context else None
    queue = run.work_queue_name if run else None
    if queue is not None and queue != site:
        raise RuntimeError(
            f"site {site}: this flow run came from work queue {queue!r} of pool "
            f"{run.work_pool_name!r}, not the site's own; nothing measured (start `"
            f"{worker_command(site)}` in that site)"
        )


@dataclass
class SiteRun:
    """One site's part of a nightly run, as the nightly run sees it."""

    site: str
    envs: list[Environment]
    flow_run_id: str | None = None
    state: str = "not sent"
    missing: str | None = None  # why the site's environments were not measured
    started_after_s: float | None = None

    def summary(self) -> dict:
        """What the reports say of this site."""
        return {
            "site": self.site,
            "environments": [env.name for env in self.envs],
            "flow_run_id": self.flow_run_id,
            "state": self.state,
            "missing": self.missing,
            "started_after_s": self.started_after_s,
        }


def send_sites(
    by_site: dict[str, list[Environment]],
    run_id: str,
    lake: Lake,
    config_path: str,
    profile: str,
) -> list[SiteRun]:
    """Create one measure-site flow run per remote site on that site's work queue; return at
    once (the caller measures the local site meanwhile)."""
    sent = []
    for site, envs in by_site.items():
        if site == LOCAL_SITE:
            continue
        part = SiteRun(site, envs)
        if not engine.orchestrated():
            # A one-shot run without a Prefect API: no work queue to send the site to.
            part.missing = (
                "not sent: this run has no Prefect API (set PREFECT_API_URL to the server "
                "the sites' workers serve; without one `yardstick run` measures the local "
                "site only)"
            )
            part.state = "not sent"
            sent.append(part)
            continue
        try:
            flow_run: FlowRun = run_deployment(
                SITE_DEPLOYMENT,
                parameters={
                    "site": site,
                    "run_id": run_id,
                    "lake_dir": lake.uri,
                    "config_path": config_path,
                    "profile": profile,
                    "env_names": [env.name for env in envs],
                },
                work_queue_name=site,
                timeout=0,
                flow_run_name=f"{site}-{run_id}",
            )
        except ObjectNotFound:
            # `yardstick run` (its own Prefect server) or a server where prefect.yaml was not
            # deployed: nothing can take the site's part.
            part.missing = (
                f"not sent: this Prefect API has no {SITE_DEPLOYMENT} deployment (deploy "
                f"prefect.yaml and run `{worker_command(site)}` in that site; `yardstick "
                f"run` measures the local site only)"
            )
            part.state = "not sent"
        except Exception as exc:  # the API refused: this site only is missing
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            part.missing = f"not sent to work queue {site!r}: {type(exc).__name__} {text}".strip()
            part.state = "not sent"
        else:
            part.flow_run_id = str(flow_run.id)
            part.state = flow_run.state.type.value if flow_run.state else "SCHEDULED"
        sent.append(part)
    return sent


def wait_for_sites(
    parts: list[SiteRun],
    start_timeout_s: float = START_TIMEOUT_S,
    site_timeout_s: float = SITE_TIMEOUT_S,
    started: float | None = None,
) -> None:
    """Wait until every sent site's run has ended; cancel a run no worker started within
    `start_timeout_s` (its worker is down) or still running after `site_timeout_s`."""
    started = started or time.monotonic()
    waiting = [p for p in parts if p.flow_run_id and not p.missing]
    if not waiting:
        return  # nothing sent: no client (a run without a Prefect API has none)
    with get_client(sync_client=True) as client:
        while waiting:
            elapsed = time.monotonic() - started
            for part in list(waiting):
                run = client.read_flow_run(part.flow_run_id)
                state = run.state.type if run.state else StateType.SCHEDULED
                part.state = state.value
                if state in (StateType.RUNNING, StateType.CANCELLING):
                    part.started_after_s = part.started_after_s or elapsed
                if run.state and run.state.is_final():
                    if state != StateType.COMPLETED:
                        part.missing = f"its flow run ended {state.value}: {run.state.message}"
                    waiting.remove(part)
                    continue
                never_started = state in (StateType.SCHEDULED, StateType.PENDING)
                if never_started and elapsed > start_timeout_s:
                    part.missing = (
                        f"no worker of work queue {part.site!r} started its run within "
                        f"{start_timeout_s:.0f} s (is `{worker_command(part.site)}` running "
                        f"there?)"
                    )
                elif elapsed > site_timeout_s:
                    part.missing = f"its run did not finish within {site_timeout_s:.0f} s"
                elif interrupt.STOP.is_set():
                    part.missing = f"not waited for: {interrupt.stop_reason()}"
                else:
                    continue
                # Cancelled, so that a worker coming up later does not measure for nobody.
                client.set_flow_run_state(
                    part.flow_run_id, Cancelled(message=part.missing), force=True
                )
                waiting.remove(part)
            if waiting:
                time.sleep(POLL_S)


def record_missing(part: SiteRun, run_id: str, lake: Lake, profile_name: str) -> None:
    """Land a `missing` run row (with its reason) for each environment of a missing site that
    has none. Written by the hub, it carries no duration, machine or pid: nothing measured."""
    landed = set(delta.read(lake, "runs", run_ids={run_id}, columns=["env"])["env"].to_pylist())
    profile = get_profile(profile_name)
    for env in part.envs:
        if env.name in landed:
            continue
        now = utc_now()
        reason = f"site {part.site}: {part.missing}"
        step = {
            "family": "site",
            "status": "failed",
            "reason": reason,
            "started_at": now,
            "finished_at": now,
            "duration_s": None,
            "window_s": 0.0,
        }
        run_row = {
            "profile": profile.name,
            "started_at": now,
            "finished_at": now,
            "duration_s": None,  # not measured: no time to show
            "status": "missing",
            "error": reason,
            "mode": env.mode,
            "transport": env.transport_label,
            "url": env.url_redacted,
            "host_group": host_group_label([env]),
            "same_server_as": env.same_server_as,
            "prober_on_host": env.on_server_host,
            "tool_version": __version__,
            "site": env.site,
            # No prober, no worker: the hub's own process measured nothing of it.
            "prober_hostname": None,
            "prober_pid": None,
            "worker_pid": None,
            "flow_run_id": part.flow_run_id,  # the site's run nobody started (or None)
        }
        try:
            # Steps first: the run row marks the environment's files whole (landing.py).
            delta.write(lake, "steps", env.name, run_id, to_table("steps", [step]))
            delta.write(lake, "runs", env.name, run_id, to_table("runs", [run_row]))
        except delta.LakeConflict:
            continue  # the site landed it after all, just now


def site_outcomes(
    parts: list[SiteRun], run_id: str, lake: Lake, profile_name: str
) -> list[EnvOutcome]:
    """Every remote environment's outcome, read from the run rows its site landed (failed
    rows, with the reason, landed here for the environments of a missing site)."""
    for part in parts:
        if part.missing:
            run_logger().warning("site %s missing: %s", part.site, part.missing)
            record_missing(part, run_id, lake, profile_name)
    remote = {env.name for part in parts for env in part.envs}
    rows = _read_rows(lake, "runs", run_id, remote)
    windows: dict[str, float] = {}
    for step in _read_rows(lake, "steps", run_id, remote):
        windows[step["env"]] = windows.get(step["env"], 0.0) + (step.get("window_s") or 0.0)
    return [
        EnvOutcome(
            env=row["env"],
            mode=row["mode"] or "",
            status=row["status"],
            duration_s=row["duration_s"] or 0.0,  # None: missing, never measured
            window_s=windows.get(row["env"], 0.0),
            error=row["error"],
        )
        for row in sorted(rows, key=lambda r: r["env"])
    ]


def _read_rows(lake: Lake, table: str, run_id: str, envs: set[str]) -> list[dict]:
    """The rows of one run in one lake table, for these environments (with `env`)."""
    data = delta.read(lake, table, sorted(envs), {run_id})
    return data.drop_columns(["period"]).to_pylist()
