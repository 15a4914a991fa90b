"""Stopping early, cleanly: the operator's Ctrl-C, a lost parent process and each family's time
bound, seen by every loop, sleep and C tool the families run.

Families run in Prefect's worker threads, where no signal arrives and no thread can be killed:
they stop themselves at the next `check()` (between windows, cells, pages, repetitions), and
their own `finally` blocks set CONFIG back and remove fixtures on the way out."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Set once per process: every family of every environment stops at its next check.
STOP = threading.Event()
_reason: list[str] = []
_stop_signal: list[int] = []


class Interrupted(Exception):
    """The run was asked to stop (Ctrl-C, SIGTERM, its worker gone)."""


class FamilyTimeout(Exception):
    """A family ran past its time bound."""


class RunEnding(Exception):
    """A run's own ending (its Failed or Cancelled state's data, flows/outcome.RunEnded).

    Prefect's engine, under a worker (`python -m prefect.engine`), asks a finished run for its
    result, which raises a failed state's data again, and logs that as "Engine execution exited
    with unexpected exception" with its traceback: the state's message already says it all."""


@dataclass(frozen=True)
class Bound:
    """The wall-clock bound of the family running in this context."""

    family: str
    timeout_s: float
    deadline: float  # time.monotonic()


_bound: ContextVar[Bound | None] = ContextVar("yardstick_family_bound", default=None)


class _NoTracebackForStops(logging.Filter):
    """Prefect logs a task that raised with its traceback; a stop asked for is no bug, and a
    run's own ending is said by its state (the engine's record of it is dropped)."""

    def filter(self, record: logging.LogRecord) -> bool:
        failure = record.exc_info[1] if record.exc_info else None
        if isinstance(failure, RunEnding):
            return False
        if isinstance(failure, (Interrupted, FamilyTimeout)):
            record.exc_info, record.exc_text = None, None
        return True


_QUIET = _NoTracebackForStops()


def quiet_stop_tracebacks() -> None:
    """Log a stopped or timed-out family in one line, not with Prefect's traceback, and a
    run that ended Failed or Cancelled by its state alone."""
    for name in ("prefect.task_runs", "prefect.flow_runs"):
        logging.getLogger(name).addFilter(_QUIET)  # idempotent


def request_stop(reason: str, signum: int | None = None) -> None:
    """Ask every family to stop at its next check; the first reason (and signal) is kept."""
    if not _reason:
        _reason.append(reason)
        if signum is not None:
            _stop_signal.append(signum)
    STOP.set()


def stop_reason() -> str | None:
    """Why the run was asked to stop, or None when it was not."""
    return _reason[0] if STOP.is_set() and _reason else None


def reset() -> None:
    """Forget a stop request (tests and long-lived processes that run again)."""
    STOP.clear()
    _reason.clear()
    _signals.clear()
    _stop_signal.clear()


@contextmanager
def bounded(family: str, timeout_s: float) -> Iterator[Bound]:
    """Give the block (one family) a wall-clock bound that `check()` enforces."""
    bound = Bound(family, timeout_s, time.monotonic() + timeout_s)
    token = _bound.set(bound)
    try:
        yield bound
    finally:
        _bound.reset(token)


def remaining_s() -> float | None:
    """Seconds left before the current family's bound (None when unbounded)."""
    bound = _bound.get()
    return None if bound is None else bound.deadline - time.monotonic()


def current_bound() -> Bound | None:
    """The bound of the family running in this context (None when unbounded)."""
    return _bound.get()


# A unit of work (a benchmark cell, a repetition) is started only when its estimate, times
# this margin, plus the reserve for the family's cleanup, fits in what is left of the bound:
# one cut at the bound is measurement thrown away, one skipped is said in the step.
BUDGET_MARGIN = 1.25
BUDGET_RESERVE_S = 1.0


def fits(estimate_s: float | None) -> bool:
    """Whether work estimated at `estimate_s` can finish before the family's bound; True when
    unbounded, and when nothing is known yet (the first unit: measuring nothing is worse)."""
    left = remaining_s()
    if left is None or estimate_s is None:
        return True
    return estimate_s * BUDGET_MARGIN + BUDGET_RESERVE_S <= left


def wont_fit() -> str:
    """Why a unit was not started: the family's bound, in the words the step shows."""
    bound = _bound.get()
    limit = f"the {bound.timeout_s:g} s bound" if bound is not None else "the family's bound"
    return f"would not finish within {limit}"


def check() -> None:
    """Raise Interrupted when a stop was asked, FamilyTimeout past the family's bound."""
    if STOP.is_set():
        raise Interrupted(f"interrupted: {stop_reason() or 'stop requested'}")
    bound = _bound.get()
    if bound is not None and time.monotonic() >= bound.deadline:
        raise FamilyTimeout(f"{bound.family} stopped at its {bound.timeout_s:g} s bound")


def sleep(seconds: float) -> None:
    """Sleep, waking at once for a stop request or the family's bound (then raising)."""
    left = remaining_s()
    STOP.wait(max(0.0, seconds if left is None else min(seconds, left)))
    check()


_signals: list[int] = []
# The process groups of the C tools running now (yardstick/host/tools.run_tool): each runs
# in a group of its own, out of a terminal's reach, so leaving at once must end them here.
_child_groups: set[int] = set()


@contextmanager
def child_group(pgid: int) -> Iterator[None]:
    """While the block runs, the process group `pgid` (a C tool) is killed if the run leaves
    at once (a second Ctrl-C)."""
    _child_groups.add(pgid)
    try:
        yield
    finally:
        _child_groups.discard(pgid)


def _kill_child_groups() -> None:
    """SIGKILL every C tool's process group still running (leaving at once)."""
    for pgid in list(_child_groups):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # gone meanwhile


def _on_signal(signum: int, _frame) -> None:
    """First signal: ask the families to stop and clean up. Second: leave at once."""
    name = signal.Signals(signum).name
    _signals.append(signum)
    if len(_signals) > 1:
        # The operator insists: what is left behind is cleaned by the next run.
        os.write(2, f"\n{name} again: leaving now; the next run cleans up\n".encode())
        _kill_child_groups()
        os._exit(128 + signum)
    if STOP.is_set():
        return  # already stopping (Prefect turned this signal into an exception first)
    request_stop(f"{name} received", signum)
    os.write(
        2,
        f"\n{name}: stopping the current measurement and restoring the servers "
        "(press again to leave at once)\n".encode(),
    )


def exit_code() -> int:
    """The shell's code for a run stopped by a signal: 128 + its number (130 for Ctrl-C)."""
    return 128 + (_stop_signal[0] if _stop_signal else signal.SIGINT)


@contextmanager
def signals_stop_the_run(signums: tuple[int, ...] = (signal.SIGINT,)) -> Iterator[None]:
    """While the block runs (main thread only), these signals ask for a clean stop."""
    previous = {signum: signal.signal(signum, _on_signal) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def watch_parent(poll_s: float = 1.0) -> threading.Thread | None:
    """When this process was started by a Prefect worker, stop the run once the worker is gone.

    A worker killed with -9 leaves its flow process re-parented and still measuring; Linux
    tells a child nothing, so a thread notices the parent change."""
    if not os.environ.get("PREFECT__FLOW_RUN_ID"):
        return None  # run by hand: a closed terminal is the shell's business (nohup)
    parent = os.getppid()

    def watch() -> None:
        while not STOP.wait(poll_s):
            if os.getppid() != parent:
                log.warning("parent process %d is gone: stopping the run", parent)
                request_stop(f"its parent process {parent} (the Prefect worker) is gone")
                return

    thread = threading.Thread(target=watch, name="yardstick-parent-watch", daemon=True)
    thread.start()
    return thread
