"""Nightly flow: measure every environment, land, compact the lake, update the warehouse, render."""

from __future__ import annotations

import re
import time
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Cancelled, Failed, State
from prefect.task_runners import ThreadPoolTaskRunner

from yardstick import engine, interrupt
from yardstick.flows.announce import announce_verdicts, outcome_events
from yardstick.flows.artifacts import for_artifact
from yardstick.flows.landing import land_rebaselines, land_tool_cost, run_logger
from yardstick.flows.measure import measure_environments
from yardstick.flows.outcome import RunEnded, RunSummary, not_landed_of
from yardstick.flows.plan import MAX_PARALLEL_GROUPS
from yardstick.flows.sites import (
    SITE_TIMEOUT_S,
    START_TIMEOUT_S,
    SiteRun,
    send_sites,
    site_outcomes,
    wait_for_sites,
)
from yardstick.flows.targets import (
    check_secrets,
    configured_lake,
    configured_notify,
    environments,
    sites_of,
)
from yardstick.host import selfcost
from yardstick.reports.render import render_reports
from yardstick.settings.config import LOCAL_SITE
from yardstick.settings.profiles import get_profile
from yardstick.storage import compaction, dbt, delta, loghealth, retention, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.preflight import check_run_paths, lake_at


@task(name="compact-lake", cache_policy=NO_CACHE)
def compact_lake(lake: Lake) -> str | None:
    """Merge the lake's small files (per table, environment and month) and say what it did;
    return None, or why the lake could not be written (full, a folder gone)."""
    try:
        report = compaction.compact(lake)
    except OSError as exc:
        return _lake_problem(lake, "compaction", exc)
    run_logger().info(report.summary())
    return None


@task(name="update-warehouse", cache_policy=NO_CACHE)
def update_warehouse(
    lake: Lake, warehouse_path: str, full_rebuild: bool = False, until_run_id: str | None = None
) -> str | None:
    """Add what landed since the last update to the warehouse (or rebuild it, saying why);
    return None, or why it could not (one logged line: the night's events still go out, from
    what landed). Ctrl-C or SIGTERM stops it within seconds (interrupt.Interrupted)."""
    try:
        with dbt.signals_stop_the_update():
            result = warehouse.update(
                lake, warehouse_path, full=full_rebuild, until_run_id=until_run_id
            )
    except interrupt.Interrupted:
        raise
    except Exception as exc:  # whatever it was, the lake holds the night: said, not raised
        line = (
            f"warehouse {warehouse_path}: not updated ({_first_line(exc)}); what landed is "
            "in the lake, and the next run updates the warehouse and reports"
        )
        run_logger().error(line)
        run_logger().debug("warehouse update failed", exc_info=True)
        return line
    run_logger().info(
        "warehouse %s (%s): %d runs, %d files read, load %.1f s, models %.1f s, total %.1f s",
        result.mode,
        result.reason,
        result.runs_added,
        result.files_read,
        result.load_s,
        result.models_s,
        result.wall_s,
    )
    return None


def _first_line(exc: BaseException) -> str:
    """An error's first line (its class name when it has no text)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


@task(name="apply-retention", cache_policy=NO_CACHE)
def apply_retention(lake: Lake, warehouse_path: str, detail_days: int) -> str | None:
    """Drop per-run detail older than `detail_days`, its figures kept in the lake; return
    None, or why the lake could not be written."""
    try:
        report = retention.apply(lake, warehouse_path, detail_days)
    except OSError as exc:
        return _lake_problem(lake, "retention", exc)
    run_logger().info(report.summary())
    return None


def _lake_problem(lake: Lake, what: str, exc: OSError) -> str:
    """A lake step that could not write, as one logged line (no traceback): every lake file
    appears whole or not at all, so what landed stays readable and the next run does the
    step again."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename:
        reason += f": {exc.filename}"
    line = f"lake {lake}: {what} not done ({reason}); the next run does it"
    run_logger().error(line)
    return line


@task(name="render-reports", cache_policy=NO_CACHE)
def render(
    warehouse_path: str,
    out_dir: str,
    run_id: str,
    sites: list[dict] | None = None,
    own_cost: list[dict] | None = None,
    not_landed: list[dict] | None = None,
    lake_notes: list[str] | None = None,
) -> tuple[dict[str, str], str | None]:
    """Render one markdown report per environment of this run, plus the index; `own_cost`:
    the tool's cost of this run's phases the warehouse does not hold yet; `not_landed`: the
    environments whose run is not in the lake, and why; `lake_notes`: what the check of the
    lake's log repaired or refused. Returns (env -> report, None), or
    ({}, why nothing was rendered: one logged line)."""
    try:
        written = render_reports(
            warehouse_path,
            out_dir,
            run_id,
            sites=sites,
            own_cost=own_cost,
            not_landed=not_landed,
            lake_notes=lake_notes,
        )
    except interrupt.Interrupted:
        raise
    except Exception as exc:  # the events still go out
        line = f"reports not rendered from {warehouse_path} ({_first_line(exc)})"
        run_logger().error(line)
        run_logger().debug("rendering failed", exc_info=True)
        return {}, line
    return {env: str(path) for env, path in written.items()}, None


@task(name="publish-artifacts", cache_policy=NO_CACHE)
def publish(reports: dict[str, str], out_dir: str, warehouse_path: str, run_id: str) -> None:
    """Show the reports, the comparison and what moved in Prefect's UI as artifacts."""
    for env, path in reports.items():
        create_markdown_artifact(
            markdown=for_artifact(Path(path).read_text(), Path(path).parent),
            key=_artifact_key(env),
            description=f"redis-yardstick report for {env} ({run_id})",
        )
    comparison = Path(out_dir) / "comparison.md"
    if comparison.exists():
        create_markdown_artifact(
            markdown=for_artifact(comparison.read_text(), comparison.parent),
            key="yardstick-comparison",
            description=f"environments side by side on ratios ({run_id})",
        )
    con = warehouse.connect_read_only(warehouse_path)
    try:
        cursor = con.execute(
            "select env, figure, subject, nature, round(value, 6) as value, unit,"
            " round(baseline_median, 6) as baseline_median,"
            " round(change_share * 100, 2) as change_pct,"
            " round(noise_share * 100, 2) as noise_band_pct, verdict"
            " from report_changes order by env"
        )
        names = [d[0] for d in cursor.description]
        moved = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()
    create_table_artifact(
        table=moved or [{"verdict": "nothing moved beyond noise"}],
        key="yardstick-changes",
        description=f"figures that moved beyond noise in the latest runs ({run_id})",
    )


def _artifact_key(env: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return "yardstick-" + re.sub(r"[^a-z0-9-]+", "-", env.lower()).strip("-")


@flow(
    name="yardstick-nightly",
    task_runner=ThreadPoolTaskRunner(max_workers=MAX_PARALLEL_GROUPS),
    log_prints=True,
)
@selfcost.metered()
def nightly(
    config_path: str | None = None,
    env_names: list[str] | None = None,
    profile: str = "nightly",
    lake_dir: str | None = None,
    warehouse_path: str = "warehouse.duckdb",
    out_dir: str = "reports-out",
    detail_days: int = retention.DEFAULT_DETAIL_DAYS,
    full_rebuild: bool = False,
    start_timeout_s: float = START_TIMEOUT_S,
    site_timeout_s: float = SITE_TIMEOUT_S,
) -> RunSummary | State:
    """Measure (other sites through their work queues), land, compact, update the warehouse
    and render; the run fails (after reporting) if any environment or site did.

    `lake_dir`: the lake (a folder or s3://bucket/prefix); default: the environments file's
    `lake:`, else ./lake. A site whose run no worker starts within `start_timeout_s`, or
    that does not finish within `site_timeout_s`, is reported missing."""
    wall_start = time.perf_counter()
    interrupt.quiet_stop_tracebacks()
    interrupt.watch_parent()  # under a worker: stop once the worker is gone
    chosen = get_profile(profile)
    lake = lake_at(lake_dir or configured_lake(config_path) or "lake")
    # Before any server is touched: a lake that cannot be written, or a directory given as
    # the warehouse file, is one line, not a lost run.
    check_run_paths(lake, warehouse_path, out_dir)
    # Before anything lands: a log a crash damaged loses runs silently, or refuses every
    # append; what is safe is repaired, the rest refused with the command (in the index).
    repaired, refused = loghealth.check_and_repair(lake)
    for line in repaired:
        run_logger().warning(line)
    for line in refused:
        run_logger().error(line)
    run_id = delta.new_run_id()
    parts: list[SiteRun] = []
    # The tool's own cost per phase (yardstick/host/selfcost.py), landed as `tool_cost`.
    meter = selfcost.current()
    with environments(config_path, env_names) as (envs, server_binary):
        by_site = sites_of(envs)
        # This process measures the local site only: other sites check their own secrets.
        check_secrets(by_site.get(LOCAL_SITE, []), config_path or "embedded default")
        # Series declared the new normal: landed with this run, before its runs rows.
        land_rebaselines(config_path, envs, run_id, lake)
        if config_path and set(by_site) != {LOCAL_SITE}:
            # Other sites measure from where their servers are, meanwhile.
            parts = send_sites(by_site, run_id, lake, config_path, chosen.name)
        local = by_site.get(LOCAL_SITE, [])
        meter.switch("measure")
        outcomes = measure_environments(local, chosen, run_id, lake, server_binary)
        meter.switch(None)
    if parts:
        wait_for_sites(parts, start_timeout_s, site_timeout_s, started=wall_start)
        outcomes += site_outcomes(parts, run_id, lake, chosen.name)

    def summary() -> RunSummary:
        """The run so far, for its caller."""
        return RunSummary(
            run_id=run_id,
            profile=chosen.name,
            lake_dir=lake.uri,
            warehouse_path=warehouse_path,
            out_dir=out_dir,
            wall_s=time.perf_counter() - wall_start,
            outcomes=outcomes,
        )

    def land_cost(phases: tuple[str, ...] | None = None) -> None:
        """Land the tool's cost measured so far (of `phases`) under the run's first
        environment; a lake that refuses it loses only it."""
        try:
            carrier = min((o.env for o in outcomes), default=None)
            if carrier is not None:
                land_tool_cost(meter, lake, run_id, carrier, phases)
        except Exception as exc:  # the run's measurements are in: this costs only the rows
            run_logger().warning("lake %s: the tool's cost not landed: %s", lake, exc)

    def stopped(where: str, message: str) -> State:
        """The run stopped by the operator at `where`, for its caller."""
        meter.finish()
        land_cost()
        part = summary()
        part.stopped = where
        said = f"{interrupt.stop_reason()}: {message}"
        return Cancelled(message=said, data=RunEnded(said, part))

    if interrupt.STOP.is_set():
        # Stopped by the operator: servers restored and the interruption landed; the
        # warehouse and the reports are brought up to date by the next run.
        return stopped("measuring", "stopped after restoring the servers")
    # A lake that fills up (or a folder lost) mid-run: what landed stays readable (every
    # lake file appears whole or not at all), so the run still builds and reports it.
    meter.switch("landing")
    problems = [*refused, engine.call(compact_lake, lake)]
    meter.switch(None)
    # Before the update that loads this run: the warehouse and rendering phases land later.
    land_cost()
    meter.switch("warehouse")
    try:
        unbuilt = engine.call(
            update_warehouse, lake, warehouse_path, full_rebuild, until_run_id=run_id
        )
    except interrupt.Interrupted:
        # dbt cancelled within seconds: a rebuild's folder is removed, an update left
        # unfinished makes the next one a rebuild; nothing rendered from a half-built one.
        return stopped("warehouse", "stopped while updating the warehouse")
    problems.append(unbuilt)
    if not unbuilt:  # retention keeps detail until the warehouse holds its figures
        problems.append(engine.call(apply_retention, lake, warehouse_path, detail_days))
    if interrupt.STOP.is_set():
        return stopped("reports", "stopped after updating the warehouse, before rendering")
    sites = [part.summary() for part in parts]
    meter.switch("rendering")
    # This run's warehouse phase is in no warehouse yet: the report shows it from the meter.
    own_cost = meter.report_rows(("warehouse",))
    reports: dict[str, str] = {}
    unrendered = None
    if not unbuilt:
        reports, unrendered = engine.call(
            render,
            warehouse_path,
            out_dir,
            run_id,
            sites,
            own_cost,
            not_landed_of(outcomes),
            repaired + refused,
        )
        problems.append(unrendered)
    problems = [line for line in problems if line]
    for outcome in outcomes:
        outcome.report = reports.get(outcome.env)
    if engine.orchestrated():
        # Artifacts, and tonight's verdict per environment as a Prefect event (an automation
        # notifies people): both live in a Prefect API, which a one-shot run has none of.
        if reports:
            publish(reports, out_dir, warehouse_path, run_id)
        # Without a warehouse to judge from, each environment's outcome (missing, failed,
        # measured) still goes out, from what the run itself knows.
        fallback = outcome_events(outcomes, run_id, chosen.name, unbuilt or unrendered)
        announce_verdicts(
            None if unbuilt else warehouse_path,
            run_id,
            configured_notify(config_path),
            fallback=fallback,
        )
    elif configured_notify(config_path):
        run_logger().warning(
            "notify: not sent: a notification block lives in a Prefect API, and this run has "
            "none (set PREFECT_API_URL)"
        )
    meter.finish()
    land_cost(selfcost.LATE_PHASES)  # a second, small commit: loaded by the next update
    finished = summary()
    finished.problems = problems
    if finished.failed or problems:
        names = ", ".join(f"{o.env} ({o.status})" for o in finished.failed)
        message = "; ".join(
            ([f"environments not fully measured: {names}"] if names else []) + problems
        )
        # Failed with its message (the UI's state message) and the summary inside the
        # exception Prefect expects of a failed state's data.
        return Failed(message=message, data=RunEnded(message, finished))
    return finished


if __name__ == "__main__":
    nightly()
