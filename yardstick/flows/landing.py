"""One environment's families run and landed: a step row per family, a run row per
environment. The same code as nightly's `_run_family` / `_record_run`, in a module that
imports no warehouse, reports or charts, so the collect flow (every 5 minutes, a process
each time) does not pay for them."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime

import pyarrow as pa
from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.exceptions import MissingContextError
from prefect.states import State

from yardstick import __version__, engine, interrupt
from yardstick.flows.outcome import EnvOutcome
from yardstick.host import selfcost
from yardstick.host.familyload import LoadSampler
from yardstick.host.selfcost import TOOL_COST
from yardstick.settings.config import Environment
from yardstick.settings.profiles import Profile
from yardstick.storage import delta
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table
from yardstick.tasks.base import (
    FAMILY_LOAD,
    Family,
    Measured,
    Progress,
    RunContext,
    Skipped,
    tracking_progress,
    utc_now,
)

# Failures that mean the server cannot be reached at all: later families are skipped.
UNREACHABLE = ("ConnectionError", "TimeoutError", "AuthenticationError", "MissingSecret")


def _flow_run_id() -> str | None:
    """The Prefect flow run this process serves, if any."""
    from prefect.runtime import flow_run

    return flow_run.id


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The flow or task run's logger; a plain one where a family is called outside a run."""
    try:
        return get_run_logger()
    except MissingContextError:
        return engine.log


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and first line of text."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_unreachable(exc: BaseException) -> bool:
    """Whether an exception says the server cannot be reached (by class name, any library)."""
    return any(cls.__name__ in UNREACHABLE for cls in type(exc).__mro__)


def family_timeout_s(name: str, env: Environment, profile: Profile) -> float:
    """A family's wall-clock bound: the environment's own for it, else the profile's."""
    return (env.family_timeouts_s or {}).get(name, profile.family_timeout_s)


def run_family(
    family: Family,
    env: Environment,
    profile: Profile,
    context: RunContext,
    run_id: str,
    lake: Lake,
    unreachable: str | None,
    plain: bool = False,
) -> dict:
    """Run one family and land its tables; return its step row (with `unreachable` set when
    the failure means the server cannot be reached). `plain`: call its function, not as a
    step (no task run, no load sampled: the 5-minute collection)."""
    step_start, step_started_at = time.perf_counter(), utc_now()
    step = {
        "family": family.name,
        "started_at": step_started_at,
        "window_s": 0.0,
        "params": family.params_json(profile),
        "params_digest": family.params_digest(profile),
    }
    skip = family.skip_reason(env)
    if unreachable:
        skip = f"not attempted: server unreachable ({unreachable})"
    if interrupt.STOP.is_set():
        skip = f"not attempted: {interrupt.stop_reason()}"
    if skip:
        return {
            **step,
            "status": "skipped",
            "reason": skip,
            "finished_at": step_started_at,
            "duration_s": 0.0,
        }
    timeout_s = family_timeout_s(family.name, env, profile)
    meter = selfcost.current()  # the tool's own cost: this thread's CPU for the family
    try:
        with (
            tracking_progress() as progress,
            interrupt.bounded(family.name, timeout_s),
            meter.family(family.name, env.name),
        ):
            measured = _measure(family, env, profile, context, progress, plain)
        with meter.landing(env.name):
            for table, data in measured.tables.items():
                delta.write(lake, table, env.name, run_id, data)
        # Not a steps column: record_run takes it off into the outcome (what a collection says).
        step["landed_rows"] = {table: data.num_rows for table, data in measured.tables.items()}
        # Cells or repetitions left out to stay within the bound: partial, and says which.
        done = [progress.summary()] if progress.partial else []
        status = "failed" if measured.problems else ("partial" if done else "ok")
        if done and not progress.done:
            status = "failed"  # none fitted: nothing measured
        reason = "; ".join(done + measured.problems + measured.notes) or None
        step.update(status=status, reason=reason, window_s=measured.window_s)
    except Skipped as exc:
        step.update(status="skipped", reason=str(exc))
    except interrupt.Interrupted as exc:
        # The family's own finally blocks have restored what it changed on the way out.
        landed, finished = land_finished(progress, env, run_id, lake)
        reason = "; ".join(filter(None, [str(exc), landed]))
        step.update(status="interrupted", reason=reason, window_s=finished.window_s)
    except interrupt.FamilyTimeout as exc:
        run_logger().warning("%s: %s", env.name, exc)
        landed, finished = land_finished(progress, env, run_id, lake)
        # What finished landed: partial; nothing finished (or a cell failed): failed.
        status = "partial" if progress.done and not finished.problems else "failed"
        reason = "; ".join(filter(None, [f"timed out: {exc}", landed]))
        step.update(status=status, reason=reason, window_s=finished.window_s)
    except Exception as exc:  # one family failing must not stop the others
        reason = one_line(exc)
        run_logger().warning("%s: %s failed: %s", env.name, family.name, reason)
        step.update(status="failed", reason=reason)
        if is_unreachable(exc):
            step["unreachable"] = reason
    step.update(finished_at=utc_now(), duration_s=time.perf_counter() - step_start)
    return step


def task_run_label(name: str, env_name: str) -> str:
    """A task run's name that says its environment, in the terminal and the UI:
    `throughput[scratch-a]` (Prefect's own names, `throughput-d1a`, say none)."""
    return f"{name}[{env_name}]"


def transient(exc: BaseException) -> bool:
    """Whether a family's failure may pass on a retry: not a skip, a stop or its bound (a
    retry would start its units again, and lose those it finished)."""
    return not isinstance(exc, Skipped | interrupt.Interrupted | interrupt.FamilyTimeout)


def _retry_condition(_task: Task, _run: TaskRun, state: State) -> bool:
    """Prefect's retry condition for a family's task run: its failure is transient."""
    failure = state.data  # the exception, in the Failed state Prefect asks about
    return not isinstance(failure, BaseException) or transient(failure)


_tasks: dict[Family, Task] = {}
_tasks_lock = threading.Lock()  # host groups' threads ask for the same family at once


def family_task(family: Family) -> Task:
    """The family's function as a Prefect task, made once per family: its name and retries
    as the family declares them, nothing cached (each call measures)."""
    with _tasks_lock:
        if family not in _tasks:
            _tasks[family] = task(
                family.measure,
                name=family.task_name,
                cache_policy=NO_CACHE,
                retries=family.retries,
                retry_delay_seconds=family.retry_delay_s,
                retry_condition_fn=_retry_condition,
            )
        return _tasks[family]


def _called(family: Family, arguments: tuple) -> Measured:
    """The family's function called here (no task run), retried as the family declares."""
    return engine.retried(
        family.measure,
        *arguments,
        retries=family.retries,
        delay_s=family.retry_delay_s,
        retry_if=transient,
    )


def _measure(
    family: Family,
    env: Environment,
    profile: Profile,
    context: RunContext,
    progress: Progress,
    plain: bool,
) -> Measured:
    """Measure `env`: a task run named for it inside a flow run (its step in the terminal
    otherwise), the host's load sampled through it; `plain`: the function alone."""
    if plain:
        return _called(family, family.arguments(env, profile, context))
    label = task_run_label(family.task_name, env.name)
    sampler = LoadSampler(family.name, env.on_server_host)
    try:
        with sampler:
            arguments = family.arguments(env, profile, context)
            if engine.orchestrated():
                measured = engine.call(family_task(family), *arguments, name=label)
            else:
                with engine.journal.running(label):
                    measured = _called(family, arguments)
    except (interrupt.Interrupted, interrupt.FamilyTimeout):
        # What a stopped family finished lands from its snapshot: with the load too.
        if progress.snapshot is not None:
            progress.snapshot = functools.partial(_with_load, progress.snapshot, sampler)
        raise
    measured.tables[FAMILY_LOAD] = sampler.table()
    return measured


def _with_load(snapshot: Callable[[], Measured], sampler: LoadSampler) -> Measured:
    """A stopped family's snapshot, with the load sampled while it ran."""
    measured = snapshot()
    measured.tables[FAMILY_LOAD] = sampler.table()
    return measured


def land_finished(
    progress: Progress, env: Environment, run_id: str, lake: Lake
) -> tuple[str, Measured]:
    """Land what a stopped family finished (its last snapshot: whole units only, each table
    written atomically by delta.write); what the step's reason says of it, and what landed
    (no tables: nothing)."""
    if progress.snapshot is None:
        # A family that plans no units says nothing more than its stop.
        said = f"nothing finished to land ({progress.summary()})" if progress.planned else ""
        return said, Measured()
    try:
        measured = progress.snapshot()
        with selfcost.current().landing(env.name):
            for table, data in measured.tables.items():
                delta.write(lake, table, env.name, run_id, data)
    except Exception as exc:  # said in the step: the stop itself is the news
        run_logger().warning("%s: finished work not landed: %s", env.name, one_line(exc))
        return f"{progress.summary()} finished, not landed: {one_line(exc)}", Measured()
    said = "; ".join([f"landed {progress.summary()}", *measured.problems, *measured.notes])
    return said, measured


def instant_step(family: str, status: str, reason: str) -> dict:
    """A step row that took no time: a family not attempted, a server that did not answer."""
    now = utc_now()
    return {
        "family": family,
        "started_at": now,
        "finished_at": now,
        "duration_s": 0.0,
        "window_s": 0.0,
        "status": status,
        "reason": reason,
    }


def unreachable_step(env: Environment, reason: str) -> dict:
    """The step row of a server that did not answer before any family (its host lock's
    identity call): the families after it are not attempted."""
    run_logger().warning("%s: not measured: %s", env.name, reason)
    return instant_step("connect", "failed", reason)


def cleanup_step(env: Environment, profile: Profile) -> dict:
    """Before any family on a scratch server: undo what an earlier run of the tool left when
    it was killed (CONFIG it changed, fixture and benchmark keys); a step row saying what."""
    from yardstick.access import benchdb, scratch
    from yardstick.access.connect import open_client

    start, started_at = time.perf_counter(), utc_now()
    step = {"family": "cleanup", "started_at": started_at, "window_s": 0.0}
    if env.cluster and env.key_tag is None:
        # A cluster node serving no slot (as discovered) holds none of the tool's keys, and
        # every key command sent to it would be redirected.
        now = utc_now()
        reason = "nothing to clean: the node serves no hash slot"
        return {**step, "status": "ok", "reason": reason, "finished_at": now, "duration_s": 0.0}
    try:
        client = open_client(env, "cleanup")
        try:
            notes = scratch.recover(client, env)
        finally:
            client.close()
        if env.cluster:
            # A cluster node has database 0 only: a cluster load's keys are there, under
            # its claim (benchdb.claimed_nodes); no SELECT of another database.
            notes += benchdb.recover_node(env)
        else:
            for db in sorted({profile.throughput.db, profile.memtier.db} - {env.db}):
                notes += benchdb.recover(env, db)
        step.update(status="ok", reason="; ".join(notes) or "nothing left by earlier runs")
        if notes:
            run_logger().warning("%s: cleaned what earlier runs left: %s", env.name, notes)
    except Exception as exc:  # the families meet the same problem and say it in their steps
        step.update(status="failed", reason=f"cleanup: {one_line(exc)}")
        if is_unreachable(exc):
            step["unreachable"] = one_line(exc)
    step.update(finished_at=utc_now(), duration_s=time.perf_counter() - start)
    return step


def record_run(
    env: Environment,
    profile: Profile,
    run_id: str,
    lake: Lake,
    host_group: str,
    started_at: datetime,
    start: float,
    steps: list[dict],
) -> EnvOutcome:
    """Land the steps and the run row for one environment, and return its outcome."""
    failed = [s for s in steps if s["status"] == "failed"]
    # A family that landed part of its work (cells skipped or cut at its bound) makes the
    # run partial, never ok; with every other family failed it is still partial: some landed.
    partial = [s for s in steps if s["status"] == "partial"]
    ok = [s for s in steps if s["status"] == "ok"]
    status = "ok" if not (failed or partial) else ("partial" if ok or partial else "failed")
    failed += partial
    if any(s["status"] == "interrupted" for s in steps) or interrupt.STOP.is_set():
        status = "interrupted"
        failed += [s for s in steps if s["status"] == "interrupted"][:1]
    error = "; ".join(f"{s['family']}: {s['reason']}" for s in failed)
    landed_rows: dict[str, int] = {}
    for s in steps:
        for table, rows in s.pop("landed_rows", {}).items():
            landed_rows[table] = landed_rows.get(table, 0) + rows
    duration_s = time.perf_counter() - start
    run_row = {
        "profile": profile.name,
        "started_at": started_at,
        "finished_at": utc_now(),
        "duration_s": duration_s,
        "status": status,
        "error": error or None,
        "mode": env.mode,
        "transport": env.transport_label,
        "url": env.url_redacted,
        "host_group": host_group,
        "same_server_as": env.same_server_as,
        "prober_on_host": env.on_server_host,
        "tool_version": __version__,
        "site": env.site,
        "prober_hostname": socket.gethostname(),
        "prober_pid": os.getpid(),
        # A process worker starts the flow run as its child.
        "worker_pid": os.getppid() if os.environ.get("PREFECT__FLOW_RUN_ID") else None,
        "flow_run_id": _flow_run_id(),
    }
    try:
        # Steps before the run row: a run row is the mark that the environment's files are
        # whole (the warehouse leaves out files of runs without one).
        with selfcost.current().landing(env.name):
            delta.write(lake, "steps", env.name, run_id, to_table("steps", steps))
            delta.write(lake, "runs", env.name, run_id, to_table("runs", [run_row]))
    except OSError as exc:  # a full disk here must not stop the other environments
        status, error, landed = "failed", f"not landed: {one_line(exc)}", False
        run_logger().error("%s: %s", env.name, error)
    else:
        landed = True
    return EnvOutcome(
        env=env.name,
        mode=env.mode,
        status=status,
        duration_s=duration_s,
        window_s=sum(s["window_s"] for s in steps),
        error=error or None,
        landed_rows=landed_rows,
        landed=landed,
    )


def land_tool_cost(
    meter: selfcost.Meter,
    lake: Lake,
    run_id: str,
    carrier: str,
    phases: tuple[str, ...] | None = None,
) -> int:
    """Land the meter's rows not landed yet (of `phases`) as `tool_cost`: an environment's
    own rows under it, run-wide rows under `carrier` (the run's first environment), in one
    commit (or in the open lake batch); return the rows landed."""
    tables = meter.take(carrier, phases)
    if delta._open_batch(lake) is not None:  # a collection's batch: its commit takes them
        written = [delta.write(lake, TOOL_COST, env, run_id, t) for env, t in tables.items()]
        return sum(n or 0 for n in written)
    parts = [delta.prepare(TOOL_COST, env, run_id, t) for env, t in tables.items()]
    if not parts:
        return 0
    data = pa.concat_tables(parts)
    delta.append(lake, TOOL_COST, data, f"tool cost {run_id}")
    return data.num_rows


def land_rebaselines(
    config_path: str | None, envs: list[Environment], run_id: str, lake: Lake
) -> int:
    """Land the environments file's `rebaseline:` entries of these environments with this run
    (who, when, why in the lake; the run counts them once its runs row lands); the rows
    landed. A lake that refuses them loses only them: the run goes on."""
    if not config_path:
        return 0
    from yardstick.settings.config import load_config

    names = {env.name for env in envs}
    by_env: dict[str, list[dict]] = {}
    for entry in load_config(config_path).rebaseline:
        if entry.env in names:
            by_env.setdefault(entry.env, []).append(
                {
                    "figure": entry.figure,
                    "subject": entry.subject,
                    "declared": entry.declared,
                    "declared_by": entry.by,
                    "why": entry.why,
                }
            )
    landed = 0
    for env, rows in sorted(by_env.items()):
        try:
            landed += delta.write(lake, "rebaselines", env, run_id, to_table("rebaselines", rows))
        except Exception as exc:  # the measurements matter more than the declaration
            run_logger().warning("%s: its rebaseline entries not landed: %s", env, one_line(exc))
    return landed
