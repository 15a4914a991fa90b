"""The terminal during a run: one line per environment (its current family, families done of
planned, an ETA from earlier runs' step durations), with Prefect's log lines printed above it
through the same Console, so the two never share a line.

What each environment is doing is read from Prefect's own view of the run, the task runs of
its flow run (`throughput[scratch-a]`, flows/landing.py names them), as the UI shows them; a
run without a Prefect API reads the same names from the process's journal
(yardstick/engine.py): the flows know nothing of this display."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn

from yardstick.engine import Journal, PlainRun

POLL_S = 1.0
PAGE = 200
# The task run that holds an environment's families (yardstick/flows/nightly.py).
HOLDER = "measure-environment"
# States after which a family counts as done on its line.
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "CRASHED")


@contextmanager
def shared_console_logging(console: Console, verbose: bool) -> Iterator[None]:
    """Prefect's console handlers print through `console` (a live display above which log
    lines go), WARNING and up unless `verbose`; restored afterwards."""
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    handlers = {
        handler
        for logger in loggers
        if isinstance(logger, logging.Logger)
        for handler in logger.handlers
        if isinstance(handler, PrefectConsoleHandler)
    }
    saved = [(handler, handler.console, handler.level) for handler in handlers]
    for handler in handlers:
        handler.console = console
        handler.setLevel(logging.INFO if verbose else logging.WARNING)
    prefect_logger = logging.getLogger("prefect")
    prefect_level = prefect_logger.level
    if verbose and prefect_logger.getEffectiveLevel() > logging.INFO:
        prefect_logger.setLevel(logging.INFO)  # --verbose wins over PREFECT_LOGGING_LEVEL
    try:
        yield
    finally:
        prefect_logger.setLevel(prefect_level)
        for handler, previous, level in saved:
            handler.console = previous
            handler.setLevel(level)


def split_label(name: str) -> tuple[str, str] | None:
    """('throughput', 'scratch-a') from a task run named `throughput[scratch-a]`."""
    if not name.endswith("]") or "[" not in name:
        return None
    family, env = name[:-1].split("[", 1)
    return family, env


@dataclass
class EnvLine:
    """What one environment's line shows."""

    env: str
    planned: int | None = None
    state: str = "waiting"
    current: str | None = None
    current_since: float | None = None
    done: set[str] = field(default_factory=set)
    # Seconds per family from earlier runs of this profile (no entry: not known yet).
    expected_s: dict[str, float] = field(default_factory=dict)
    families: list[str] = field(default_factory=list)

    def eta_s(self, now: float) -> float | None:
        """Seconds left: the known durations of the families not finished yet."""
        left = [f for f in self.families if f not in self.done]
        if not left or any(f not in self.expected_s for f in left):
            return None
        total = sum(self.expected_s[f] for f in left)
        if self.current in self.expected_s and self.current_since is not None:
            total -= min(now - self.current_since, self.expected_s[self.current])
        return max(total, 0.0)

    def text(self, now: float) -> str:
        """'throughput · 3 of 12 families · ETA 1:20' (or waiting / finished)."""
        count = len(self.done)
        of = f"{count} of {self.planned}" if self.planned else f"{count}"
        parts = [self.current or self.state, f"{of} families done"]
        if self.state == "running":
            eta = self.eta_s(now)
            parts.append(f"ETA {int(eta // 60)}:{int(eta % 60):02d}" if eta is not None else "")
        return " · ".join(p for p in parts if p)


def expected_durations(warehouse: Path, profile: str) -> dict[tuple[str, str], float]:
    """Median seconds per (environment, family) of earlier runs of `profile`, with
    ('', family) the median over every environment; empty without a warehouse."""
    if not warehouse.is_file():
        return {}
    import duckdb

    try:
        con = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error:
        return {}
    try:
        steps, runs = _relation(con, "steps"), _relation(con, "runs")
        if steps is None or runs is None:
            return {}
        rows = con.execute(
            "select coalesce(s.env, ''), s.family, median(s.duration_s)"
            f" from {steps} s join {runs} r using (env, run_id)"
            " where r.profile = ? and s.status in ('ok', 'partial')"
            " group by grouping sets ((s.env, s.family), (s.family))",
            [profile],
        ).fetchall()
    except duckdb.Error:
        return {}  # an older or newer warehouse layout: no ETA, the rest works
    finally:
        con.close()
    return {(env, family): float(seconds) for env, family, seconds in rows}


def _relation(con, name: str) -> str | None:
    """The history table `name`, in whichever schema the warehouse keeps it."""
    row = con.execute(
        "select table_schema from information_schema.tables where table_name = ?"
        " order by table_schema = 'marts' desc limit 1",
        [name],
    ).fetchone()
    return f'"{row[0]}"."{name}"' if row else None


class RunProgress:
    """The live lines of one flow run (named `flow_run_name`), read from its task runs."""

    def __init__(
        self,
        console: Console,
        flow_run_name: str,
        plans: dict[str, list[str]] | None = None,
        expected: dict[tuple[str, str], float] | None = None,
        poll_s: float = POLL_S,
        journal: Journal | None = None,
    ) -> None:
        self.console = console
        self.journal = journal  # None: read the task runs from Prefect's API
        self.flow_run_name = flow_run_name
        self.plans = plans or {}
        self.expected = expected or {}
        self.poll_s = poll_s
        self.lines: dict[str, EnvLine] = {}
        self._ids: dict[str, int] = {}
        self._stop = threading.Event()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            TextColumn("{task.fields[detail]}"),
            console=console,
            transient=True,
            # Not a terminal: no live lines at all (log lines and the summary still print).
            disable=not console.is_terminal,
        )
        for env in self.plans:
            self._line(env)

    def _line(self, env: str) -> EnvLine:
        """The line of `env` (a cluster's node counts towards its environment)."""
        if env not in self.lines:
            owner = next((e for e in self.lines if env.startswith(e + ".")), None)
            if owner is not None:
                return self.lines[owner]
            families = self.plans.get(env, [])
            expected = {
                f: self.expected.get((env, f), self.expected.get(("", f)))
                for f in families
                if (env, f) in self.expected or ("", f) in self.expected
            }
            self.lines[env] = EnvLine(
                env, planned=len(families) or None, families=families, expected_s=expected
            )
            self._ids[env] = self._progress.add_task(escape(env), detail="waiting")
        return self.lines[env]

    def update(self, task_runs: list[PlainRun]) -> None:
        """Set every line from the flow run's task runs (name, state type, start)."""
        now = time.monotonic()
        running: dict[str, tuple[str, float]] = {}
        for run in task_runs:
            label = split_label(run.name or "")
            if label is None:
                continue
            family, env = label
            line = self._line(env)
            state = run.state
            if family == HOLDER:
                line.state = {"RUNNING": "running", "PENDING": "waiting"}.get(
                    state, "finished" if state in ("COMPLETED",) else state.lower()
                )
                continue
            if state == "RUNNING":
                running[line.env] = (family, now - (time.time() - run.started_s))
            elif state in FINAL:
                line.done.add(family)
        for line in self.lines.values():
            family, since = running.get(line.env, (None, None))
            line.current, line.current_since = family, since
            if family and line.state == "waiting":
                line.state = "running"
            self._progress.update(self._ids[line.env], detail=escape(line.text(now)))

    def _read(self, client) -> list[PlainRun]:
        """Every task run of the flow run, page by page."""
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

        runs, offset = [], 0
        flow_runs = FlowRunFilter(name=FlowRunFilterName(any_=[self.flow_run_name]))
        while True:
            page = client.read_task_runs(flow_run_filter=flow_runs, limit=PAGE, offset=offset)
            runs += [
                PlainRun(
                    run.name or "",
                    run.state.type.value if run.state else "PENDING",
                    run.start_time.timestamp() if run.start_time else time.time(),
                )
                for run in page
            ]
            if len(page) < PAGE:
                return runs
            offset += PAGE

    def _poll(self) -> None:
        if self.journal is not None:  # a run without a Prefect API: this process's own record
            while not self._stop.wait(self.poll_s):
                self.update(self.journal.runs())
            return
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            while not self._stop.wait(self.poll_s):
                try:
                    self.update(self._read(client))
                except Exception as exc:  # the display must never stop the run
                    logging.getLogger("yardstick").debug("progress: %s", exc)

    @contextmanager
    def shown(self) -> Iterator[RunProgress]:
        """Show the lines while the block runs (nothing at all off a terminal)."""
        if self._progress.disable:
            yield self
            return
        # The thread sees this context's Prefect settings (the run's private server).
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(self._poll,), name="yardstick-progress", daemon=True
        )
        with self._progress:
            thread.start()
            try:
                yield self
            finally:
                self._stop.set()
                thread.join(timeout=5)
