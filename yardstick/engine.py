"""Where a flow's steps run: as Prefect task runs inside a flow run, or as plain calls.

The flows are written once. Inside a Prefect flow run (a deployment under a worker, the tests'
harness, a CLI run with PREFECT_API_URL set) every step is a task run the UI shows. A one-shot
CLI run without a Prefect API calls the flow's function and each step's function in this
process: Prefect's ephemeral mode would start a server (a uvicorn subprocess and its SQLite
database, seconds of CPU) to record runs nobody can look at once it stops. What such a run
does is kept here instead (`journal`), for the terminal's progress lines."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from yardstick import interrupt

# Plain steps log where Prefect's own lines go: a child of its "prefect" logger takes its
# console handler, format and level (PREFECT_LOGGING_LEVEL, the CLI's --verbose).
log = logging.getLogger("prefect.yardstick")


def orchestrated() -> bool:
    """Whether this code runs inside a Prefect flow run (steps are task runs)."""
    import sys

    if "prefect.context" not in sys.modules:
        return False  # never imported: no flow run can exist
    from prefect.context import FlowRunContext

    return FlowRunContext.get() is not None


@dataclass
class PlainRun:
    """One step run plainly: its name (`family[env]`), state and start (epoch seconds)."""

    name: str
    state: str = "RUNNING"
    started_s: float = 0.0


class Journal:
    """The plain steps of this process, as the progress lines read them (thread-safe)."""

    def __init__(self) -> None:
        self._runs: list[PlainRun] = []
        self._lock = threading.Lock()

    def runs(self) -> list[PlainRun]:
        """A copy of every step recorded so far."""
        with self._lock:
            return [PlainRun(r.name, r.state, r.started_s) for r in self._runs]

    def clear(self) -> None:
        """Forget every step (a new run in the same process)."""
        with self._lock:
            self._runs.clear()

    def add(self, name: str, state: str) -> PlainRun:
        """Record a step under `name` in `state` (PENDING, RUNNING)."""
        run = PlainRun(name, state, time.time())
        with self._lock:
            self._runs.append(run)
        return run

    @contextmanager
    def running(self, name: str | None, run: PlainRun | None = None) -> Iterator[None]:
        """Record the block as a step named `name` (nothing without a name)."""
        if name is None:
            yield
            return
        if run is None:
            run = self.add(name, "RUNNING")
        else:
            run.state, run.started_s = "RUNNING", time.time()
        log.info("Step %s: running", name)
        try:
            yield
        except BaseException as exc:
            run.state = "FAILED"
            log.info(
                "Step %s: failed after %.1f s (%s)", name, self._age_s(run), type(exc).__name__
            )
            raise
        run.state = "COMPLETED"
        log.info("Step %s: completed in %.1f s", name, self._age_s(run))

    @staticmethod
    def _age_s(run: PlainRun) -> float:
        """Seconds since the step started."""
        return time.time() - run.started_s


journal = Journal()


def call(task: Any, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
    """Run a Prefect @task: a task run inside a flow run (named `name` when given), its
    function otherwise (recorded in the journal under `name`)."""
    if orchestrated():
        if name is not None:
            label = name
            task = task.with_options(task_run_name=lambda: label)  # braces stay literal
        return task(*args, **kwargs)
    # Recorded under its task's name when given none: the progress lines show the warehouse
    # build (update-warehouse) by it.
    with journal.running(name or getattr(task, "name", None)):
        return task.fn(*args, **kwargs)


def plain_call(fn: Callable[..., Any], *args: Any, name: str | None = None, **kwargs: Any) -> Any:
    """Call `fn` as a plain step recorded under `name`."""
    with journal.running(name):
        return fn(*args, **kwargs)


def retried(
    fn: Callable[..., Any],
    *args: Any,
    retries: int,
    delay_s: float,
    retry_if: Callable[[Exception], bool],
) -> Any:
    """`fn(*args)`, called again up to `retries` times, `delay_s` apart, while what it raises
    passes `retry_if`: the retries a Prefect task run would apply, where no task run applies
    them (a plain call). The wait ends at once for a stop or the family's bound."""
    for attempt in range(retries + 1):
        try:
            return fn(*args)
        except Exception as exc:
            if attempt == retries or not retry_if(exc):
                raise
        interrupt.sleep(delay_s)
    raise AssertionError("unreachable")  # the loop returns or raises
