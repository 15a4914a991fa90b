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
# The task run that builds the warehouse after the measurements (yardstick/flows/nightly.py);
# a Prefect task run's name is this and a suffix, a plain step's this alone.
WAREHOUSE_STEP = "update-warehouse"
# The pace of this run (its finished families' wall time ÷ their usual time) is trusted from
# families this long in all; it scales the ETA between these bounds.
PACE_FROM_S = 5.0
PACE_BOUNDS = (0.5, 4.0)


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


@contextmanager
def console_on_its_own_descriptor(console: Console) -> Iterator[None]:
    """A terminal console writes through its own copy of descriptor 2 while the block runs.

    delta-rs calls point descriptor 2 at a pipe that a thread drains to the terminal
    (storage/panics.py); live lines and log lines written through that pipe could land
    after, or inside, lines written directly and leave stale live lines on the screen.
    """
    import os
    import sys

    if not console.is_terminal:
        yield
        return
    try:
        fd = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # no real descriptor behind stderr
        yield
        return
    previous = console._file  # None: follow sys.stderr again afterwards
    with os.fdopen(fd, "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None)) as own:
        console.file = own
        try:
            yield
        finally:
            console.file = previous


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
    # When the line started running (monotonic), and whom a waiting line waits for.
    running_since: float | None = None
    waiting_for: str | None = None

    def pace(self, now: float) -> float:
        """How much slower than usual this environment runs tonight: the wall time of its
        finished families (gaps between them included) ÷ their usual time; 1 until they
        amount to PACE_FROM_S (an ETA from other nights' medians ran 38 % low on a long
        environment, where every family ran slower alike)."""
        usual = sum(self.expected_s.get(f, 0.0) for f in self.done)
        if self.running_since is None or usual < PACE_FROM_S:
            return 1.0
        current_s = now - self.current_since if self.current_since is not None else 0.0
        spent = now - self.running_since - current_s
        low, high = PACE_BOUNDS
        return min(max(spent / usual, low), high)

    def eta_s(self, now: float) -> float | None:
        """Seconds left: the usual durations of the families not finished yet, at tonight's
        pace; the current family's elapsed time is taken off its own share only."""
        left = [f for f in self.families if f not in self.done]
        if not left or any(f not in self.expected_s for f in left):
            return None
        pace = self.pace(now)
        total = sum(self.expected_s[f] for f in left if f != self.current) * pace
        if self.current in self.expected_s:
            elapsed = now - self.current_since if self.current_since is not None else 0.0
            total += max(self.expected_s[self.current] * pace - elapsed, 0.0)
        return max(total, 0.0)

    def overdue_s(self, now: float) -> float:
        """How far the current family is past its usual time at tonight's pace (0: not)."""
        if self.current not in self.expected_s or self.current_since is None:
            return 0.0
        return max(now - self.current_since - self.expected_s[self.current] * self.pace(now), 0)

    def text(self, now: float) -> str:
        """'throughput · 3 of 12 families · ETA 1:20' (or waiting / finished); a family past
        its usual time says so, so the ETA never stands still unexplained."""
        count = len(self.done)
        of = f"{count} of {self.planned}" if self.planned else f"{count}"
        state = self.state
        if self.waiting_for and (state == "waiting" or not (self.current or self.done)):
            state = f"waiting for {self.waiting_for}"
        parts = [self.current or state, f"{of} families done"]
        if self.state == "running":
            eta = self.eta_s(now)
            if eta is not None:
                over = self.overdue_s(now)
                late = f" (+{clock(over)} over its usual)" if over >= 1 else ""
                parts.append(f"ETA {'≥ ' if late else ''}{clock(eta)}{late}")
        return " · ".join(p for p in parts if p)


def clock(seconds: float) -> str:
    """Seconds as m:ss (0:51, 12:07)."""
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


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
        groups: dict[str, str] | None = None,
        max_groups: int | None = None,
    ) -> None:
        self.console = console
        # env -> its host group: a group's environments run one after another.
        self.groups = groups or {}
        self.max_groups = max_groups
        self._warehouse_id: int | None = None
        self._lock_waits: dict[str, str] = {}  # env -> whom it waits for (host lock)
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
            name = run.name or ""
            if name.startswith(WAREHOUSE_STEP):
                self._show_warehouse(run)
                continue
            label = split_label(name)
            if label is None:
                continue
            family, env = label
            line = self._line(env)
            state = run.state
            if family == HOLDER:
                line.state = {"RUNNING": "running", "PENDING": "waiting"}.get(
                    state, "finished" if state in ("COMPLETED",) else state.lower()
                )
                if state == "RUNNING" and line.running_since is None:
                    line.running_since = now - (time.time() - run.started_s)
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
            if family and line.running_since is None:
                line.running_since = since
        for line in self.lines.values():
            line.waiting_for = self._waits_for(line)
            self._progress.update(self._ids[line.env], detail=escape(line.text(now)))

    def _waits_for(self, line: EnvLine) -> str | None:
        """Whom a line waits for: the host lock's holder (another run), the environment
        ahead of it on its host, or a free slot among the host groups measured at once."""
        if line.state == "running":
            return self._lock_waits.get(line.env) if not (line.current or line.done) else None
        if line.state != "waiting":
            return None
        group = self.groups.get(line.env)
        running = [other for other in self.lines.values() if other.state == "running"]
        for other in running:
            if group is not None and self.groups.get(other.env) == group:
                return f"{other.env} (same host)"
        busy = {self.groups.get(other.env, other.env) for other in running}
        if self.max_groups and len(busy) >= self.max_groups:
            hosts = f"{self.max_groups} host{'s' if self.max_groups != 1 else ''}"
            return f"a free slot ({hosts} measured at a time)"
        return None

    def lock_wait(self, message: str) -> None:
        """A measurement waits for its host's lock: `message` says for whom ("waiting for run
        R (pid 12) that holds host ..."), shown on the line of the one environment started
        and measuring nothing yet (the message names no environment; with several such
        lines, none is guessed)."""
        idle = [
            line.env
            for line in self.lines.values()
            if line.state == "running" and not (line.current or line.done)
        ]
        if len(idle) == 1:
            self._lock_waits[idle[0]] = message.split("waiting for ", 1)[-1]

    def _show_warehouse(self, run: PlainRun) -> None:
        """A line while the warehouse is built (minutes on a long history): its elapsed time;
        gone once it ends."""
        if run.state == "RUNNING":
            elapsed = time.time() - run.started_s
            detail = f"building the warehouse… {clock(elapsed)}"
            if self._warehouse_id is None:
                self._warehouse_id = self._progress.add_task("warehouse", detail=detail)
            else:
                self._progress.update(self._warehouse_id, detail=detail)
        elif self._warehouse_id is not None:
            self._progress.update(self._warehouse_id, visible=False)

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
        watcher = _LockWaits(self)
        loggers = {
            logging.getLogger(),
            logging.getLogger("prefect"),
            logging.getLogger("yardstick"),
        }
        with self._progress:
            for logger in loggers:
                logger.addHandler(watcher)
            thread.start()
            try:
                yield self
            finally:
                self._stop.set()
                thread.join(timeout=5)
                for logger in loggers:
                    logger.removeHandler(watcher)


class _LockWaits(logging.Handler):
    """Hands a host lock's "waiting for <holder> that holds <what>" log line to the lines."""

    def __init__(self, progress: RunProgress) -> None:
        super().__init__(logging.INFO)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        # A record reaches every logger it propagates through: read once.
        if getattr(record, "yardstick_lock_wait_read", False):
            return
        record.yardstick_lock_wait_read = True
        message = record.getMessage()
        if "waiting for " in message and " holds " in message:
            self.progress.lock_wait(message)
