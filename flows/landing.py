"""One environment's families run and landed: a step row per family, a run row per
environment. The same code as nightly's `_run_family` / `_record_run`, in a module that
imports no warehouse, reports or charts, so the collect flow (every 5 minutes, a process
each time) does not pay for them."""

from __future__ import annotations

import time
from datetime import datetime

from prefect import get_run_logger

from yardstick import __version__, lake
from yardstick.config import Environment
from yardstick.flows.plan import Family, RunContext
from yardstick.outcome import EnvOutcome
from yardstick.profiles import Profile
from yardstick.schemas import to_table
from yardstick.tasks.base import Skipped, utc_now

# Failures that mean the server cannot be reached at all: later families are skipped.
UNREACHABLE = ("ConnectionError", "TimeoutError", "AuthenticationError", "MissingSecret")


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and first line of text."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_unreachable(exc: BaseException) -> bool:
    """Whether an exception says the server cannot be reached (by class name, any library)."""
    return any(cls.__name__ in UNREACHABLE for cls in type(exc).__mro__)


def run_family(
    family: Family,
    env: Environment,
    profile: Profile,
    context: RunContext,
    run_id: str,
    lake_dir: str,
    unreachable: str | None,
) -> dict:
    """Run one family and land its tables; return its step row (with `unreachable` set when
    the failure means the server cannot be reached)."""
    step_start, step_started_at = time.perf_counter(), utc_now()
    step = {"family": family.name, "started_at": step_started_at, "window_s": 0.0}
    skip = family.skip_reason(env)
    if unreachable:
        skip = f"not attempted: server unreachable ({unreachable})"
    if skip:
        return {
            **step,
            "status": "skipped",
            "reason": skip,
            "finished_at": step_started_at,
            "duration_s": 0.0,
        }
    try:
        measured = family.run(env, profile, context)
        for table, data in measured.tables.items():
            lake.write(lake_dir, table, env.name, run_id, data)
        status = "failed" if measured.problems else "ok"
        reason = "; ".join(measured.problems + measured.notes) or None
        step.update(status=status, reason=reason, window_s=measured.window_s)
    except Skipped as exc:
        step.update(status="skipped", reason=str(exc))
    except Exception as exc:  # one family failing must not stop the others
        reason = one_line(exc)
        get_run_logger().warning("%s: %s failed: %s", env.name, family.name, reason)
        step.update(status="failed", reason=reason)
        if is_unreachable(exc):
            step["unreachable"] = reason
    step.update(finished_at=utc_now(), duration_s=time.perf_counter() - step_start)
    return step


def record_run(
    env: Environment,
    profile: Profile,
    run_id: str,
    lake_dir: str,
    host_group: str,
    started_at: datetime,
    start: float,
    steps: list[dict],
) -> EnvOutcome:
    """Land the steps and the run row for one environment, and return its outcome."""
    failed = [s for s in steps if s["status"] == "failed"]
    ok = [s for s in steps if s["status"] == "ok"]
    status = "ok" if not failed else ("partial" if ok else "failed")
    error = "; ".join(f"{s['family']}: {s['reason']}" for s in failed)
    duration_s = time.perf_counter() - start
    lake.write(lake_dir, "steps", env.name, run_id, to_table("steps", steps))
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
    }
    lake.write(lake_dir, "runs", env.name, run_id, to_table("runs", [run_row]))
    return EnvOutcome(
        env=env.name,
        mode=env.mode,
        status=status,
        duration_s=duration_s,
        window_s=sum(s["window_s"] for s in steps),
        error=error or None,
    )
