"""What the tool itself costs the machine it measures: CPU-seconds and peak memory of its own
process per phase of a run (start, each family, landing, warehouse, rendering), as rows of
the lake table `tool_cost` (docs/reports.md, "The tool's own cost").

Three kinds of CPU are kept apart, because they answer different questions:

- `cpu_s` is the tool's own: user + system time of this process (`getrusage(RUSAGE_SELF)`,
  which counts from the process's start, imports included) over a run-wide phase, or of the
  one thread that ran a family (`time.thread_time()`): families of different host groups run
  side by side in threads, and a thread's CPU is the only share that is its own. A family's
  helper threads (its load sampler, a contention culprit) are not in its row; they are in
  the run-wide `measure` phase.
- `children_cpu_s` is the measurement's load: the processes the run started and reaped
  (redis-benchmark, redis-cli, memtier, an embedded redis-server and its socat twin when they
  stop), `getrusage(RUSAGE_CHILDREN)`, counted when they exit, process-wide.
- `server_cpu_s` is a Prefect server the process started and watches (`watch`), read from
  /proc/<pid>/stat; null when there is none (a one-shot run starts none).

Peak memory is the process's resident peak over the phase: Linux's VmHWM, reset at each phase
start by writing "5" to /proc/self/clear_refs (the phases still open take the peak so far
first, so nested and overlapping phases each keep theirs). Where that file cannot be written,
ru_maxrss stands in: the peak since the process started, and `rss_source` says so.

The meter costs a few system calls per phase (~0.1 ms): it is on in every run."""

from __future__ import annotations

import functools
import os
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ParamSpec, TypeVar

import pyarrow as pa

TOOL_COST = "tool_cost"
# Run-wide phases in the order a run goes through them (a family's and an environment's
# landing rows sit inside `measure`); `total` is the process from its start to the last phase.
RUN_PHASES = ("start", "measure", "landing", "warehouse", "rendering", "total")
# Phases that land after the run's other rows were loaded into the warehouse (they happen
# after its update): the run lands them in a second, small commit.
LATE_PHASES = ("warehouse", "rendering", "total")
CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
PROC_STAT = Path("/proc/stat")
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# One row per phase of a run, per environment for its families and its landing.
SCHEMA = pa.schema(
    [
        # A phase of the whole process (landed under the run's first environment), or one
        # environment's family or landing (landed under that environment).
        ("run_wide", pa.bool_()),
        ("phase", pa.string()),  # RUN_PHASES, or `family` / `landing` of one environment
        ("family", pa.string()),  # the family of a `family` row, '' otherwise
        # process: the whole process's CPU over the phase; thread: the one thread's that ran it.
        ("cpu_scope", pa.string()),
        ("cpu_s", pa.float64()),  # the tool's own CPU (user + system)
        ("children_cpu_s", pa.float64()),  # processes it started and reaped meanwhile
        ("server_cpu_s", pa.float64()),  # a Prefect server it started (null: none)
        ("peak_rss_bytes", pa.int64()),  # the process's resident peak over the phase
        ("rss_source", pa.string()),  # VmHWM (reset at the phase start) | ru_maxrss (since start)
        ("wall_s", pa.float64()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        # Another family ran meanwhile in another thread: children CPU and peak are shared.
        ("overlapped", pa.bool_()),
        # Busy CPU time of the whole machine over the phase (/proc/stat), for the tool's share.
        ("host_busy_cpu_s", pa.float64()),
        ("cores", pa.int32()),
        # The measuring process, as the runs table names it: a run fanned out to sites has one
        # process per site, each with its own run-wide rows.
        ("prober_hostname", pa.string()),
        ("prober_pid", pa.int64()),
    ]
)

P = ParamSpec("P")
R = TypeVar("R")
# A meter started before another in the same process already counted the process's start.
_PROCESS_START_COUNTED = threading.Event()


def process_started_at() -> datetime:
    """When this process started (/proc/self/stat's start time after the boot time); now
    where /proc cannot tell."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(
            int(line.split()[1])
            for line in PROC_STAT.read_text().splitlines()
            if line.startswith("btime ")
        )
        return datetime.fromtimestamp(boot + ticks / TICKS_PER_S, UTC)
    except (OSError, ValueError, IndexError, StopIteration):
        return datetime.now(UTC)


def host_busy_s() -> float | None:
    """Busy CPU time of the whole machine since boot, in seconds (None off Linux)."""
    try:
        values = [int(v) for v in PROC_STAT.read_text().splitlines()[0].split()[1:]]
    except (OSError, IndexError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    # guest time is already inside user time: leave it out of the sum.
    return (sum(values[:8]) - idle) / TICKS_PER_S


def process_cpu_s(pid: int) -> float | None:
    """CPU of process `pid` and of its reaped children (utime, stime, cutime, cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(v) for v in fields[11:15]) / TICKS_PER_S
    except (OSError, ValueError, IndexError):
        return None


def _rusage_cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _vm_hwm_bytes() -> int | None:
    """The process's resident peak since the last reset (VmHWM), or None."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _max_rss_bytes() -> int:
    """ru_maxrss (kilobytes on Linux): the peak since the process started."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class _Reading:
    """The counters at one instant."""

    perf_s: float
    at: datetime
    cpu_s: float  # the process's, or the thread's for thread rows
    children_cpu_s: float
    server_cpu_s: float | None
    host_busy_s: float | None


@dataclass
class _Open:
    """A phase under way: its key, start reading and the peak seen so far."""

    key: tuple[str, bool, str, str]  # (env, run_wide, phase, family)
    scope: str
    start: _Reading
    peak_bytes: int = 0
    overlapped: bool = False


@dataclass
class CostRow:
    """One phase's cost, accumulated over every block metered under its key."""

    env: str  # '' for run-wide rows until they land under the run's first environment
    run_wide: bool
    phase: str
    family: str
    cpu_scope: str
    cpu_s: float = 0.0
    children_cpu_s: float = 0.0
    server_cpu_s: float | None = None
    peak_rss_bytes: int = 0
    rss_source: str = "VmHWM"
    wall_s: float = 0.0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    overlapped: bool = False
    host_busy_cpu_s: float | None = None
    landed: bool = False

    def as_lake_row(self) -> dict:
        """The row as the lake table `tool_cost` holds it."""
        return {
            "run_wide": self.run_wide,
            "phase": self.phase,
            "family": self.family,
            "cpu_scope": self.cpu_scope,
            "cpu_s": self.cpu_s,
            "children_cpu_s": self.children_cpu_s,
            "server_cpu_s": self.server_cpu_s,
            "peak_rss_bytes": self.peak_rss_bytes,
            "rss_source": self.rss_source,
            "wall_s": self.wall_s,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "overlapped": self.overlapped,
            "host_busy_cpu_s": self.host_busy_cpu_s,
            "cores": os.cpu_count() or 1,
            "prober_hostname": socket.gethostname(),
            "prober_pid": os.getpid(),
        }


class Meter:
    """The tool's own cost through one run of this process, phase by phase (thread-safe).

    The first meter of a process counts its `start` from the process's start (imports, the
    configuration, an embedded server's start); a later one in the same process (a test
    suite, a Python caller running several flows) from its own creation.

    `by_environment=False` (a collection: every 5 minutes, 50 environments) keeps one row
    per family for the whole run (its threads' CPU added up) and no landing rows per
    environment, so tool_cost grows by a few rows per collection, not hundreds."""

    def __init__(
        self, since_process_start: bool | None = None, by_environment: bool = True
    ) -> None:
        if since_process_start is None:
            since_process_start = not _PROCESS_START_COUNTED.is_set()
        _PROCESS_START_COUNTED.set()
        self._lock = threading.Lock()
        self._open: list[_Open] = []
        self._rows: dict[tuple[str, bool, str, str], CostRow] = {}
        self._families_running = 0
        self._server_pid: int | None = None
        self._switched: _Open | None = None
        self.by_environment = by_environment
        # The process's peak so far, before the first reset (the start phase's, from the start).
        peak_so_far = _vm_hwm_bytes() or _max_rss_bytes()
        self.resettable = self._reset_peak()
        now = self._reading("process")
        if since_process_start:
            started = process_started_at()
            age_s = max((now.at - started).total_seconds(), 0.0)
            # The process's counters were zero at its start; the machine's are not known then.
            self.origin = _Reading(now.perf_s - age_s, started, 0.0, 0.0, None, None)
        else:
            self.origin, peak_so_far = now, 0
        # The start phase: from the origin until the first other phase begins.
        self._start: _Open | None = _Open(("", True, "start", ""), "process", self.origin)
        self._start.peak_bytes = peak_so_far
        self._open.append(self._start)

    # --- counters --------------------------------------------------------------------------

    def watch(self, pid: int) -> None:
        """Count the CPU of process `pid` (a Prefect server this process started) in every
        phase from now on, as `server_cpu_s`."""
        with self._lock:
            self._server_pid = pid

    def _server_s(self) -> float | None:
        """The watched server's CPU so far, or None."""
        return process_cpu_s(self._server_pid) if self._server_pid else None

    def _reading(self, scope: str) -> _Reading:
        cpu = time.thread_time() if scope == "thread" else _rusage_cpu_s(resource.RUSAGE_SELF)
        return _Reading(
            time.perf_counter(),
            datetime.now(UTC),
            cpu,
            _rusage_cpu_s(resource.RUSAGE_CHILDREN),
            self._server_s(),
            host_busy_s() if scope == "process" else None,
        )

    def _reset_peak(self) -> bool:
        """Reset VmHWM; whether it could be (else ru_maxrss stands in)."""
        try:
            CLEAR_REFS.write_text("5")
        except OSError:
            return False
        return _vm_hwm_bytes() is not None

    def _fold_peak(self) -> None:
        """Give every open phase the peak so far (under the lock, before a reset)."""
        peak = _vm_hwm_bytes() if self.resettable else _max_rss_bytes()
        for phase in self._open:
            phase.peak_bytes = max(phase.peak_bytes, peak or 0)

    # --- phases ----------------------------------------------------------------------------

    def _begin(self, key: tuple[str, bool, str, str], scope: str) -> _Open:
        with self._lock:
            if self._start is not None:
                self._end_start()
            self._fold_peak()
            if self.resettable:
                self._reset_peak()
            opened = _Open(key, scope, self._reading(scope))
            if key[2] == "family":
                # Any family running beside this one shares its children and peak, both ways.
                if self._families_running:
                    opened.overlapped = True
                    for other in self._open:
                        if other.key[2] == "family":
                            other.overlapped = True
                self._families_running += 1
            self._open.append(opened)
            return opened

    def _end(self, opened: _Open) -> CostRow:
        end = self._reading(opened.scope)
        with self._lock:
            self._fold_peak()
            self._open.remove(opened)
            if opened.key[2] == "family":
                self._families_running -= 1
            return self._add(opened, end)

    def _end_start(self) -> None:
        """Close the start phase (under the lock): the first other phase begins."""
        opened, self._start = self._start, None
        self._fold_peak()
        if opened in self._open:
            self._open.remove(opened)
        self._add(opened, self._reading("process"))

    def _add(self, opened: _Open, end: _Reading) -> CostRow:
        """Accumulate one metered block into its row."""
        env, run_wide, phase, family = opened.key
        row = self._rows.get(opened.key)
        if row is None:
            row = CostRow(env, run_wide, phase, family, opened.scope)
            row.rss_source = "VmHWM" if self.resettable else "ru_maxrss"
            self._rows[opened.key] = row
        start = opened.start
        row.cpu_s += max(end.cpu_s - start.cpu_s, 0.0)
        row.children_cpu_s += max(end.children_cpu_s - start.children_cpu_s, 0.0)
        if end.server_cpu_s is not None:
            # A server started during the phase (none at its start): all its CPU is in it.
            row.server_cpu_s = (row.server_cpu_s or 0.0) + max(
                end.server_cpu_s - (start.server_cpu_s or 0.0), 0.0
            )
        if end.host_busy_s is not None and start.host_busy_s is not None:
            row.host_busy_cpu_s = (row.host_busy_cpu_s or 0.0) + end.host_busy_s - start.host_busy_s
        row.peak_rss_bytes = max(row.peak_rss_bytes, opened.peak_bytes)
        row.wall_s += max(end.perf_s - start.perf_s, 0.0)
        row.started_at = min(filter(None, [row.started_at, start.at]))
        row.finished_at = max(filter(None, [row.finished_at, end.at]))
        # A row already landed keeps what it landed with: the lake never holds a row twice.
        row.overlapped = row.overlapped or opened.overlapped
        return row

    def switch(self, name: str | None) -> None:
        """End the run-wide phase `switch` began last (if any) and begin `name` (None: none):
        a flow marks its phases one line each, in the order it goes through them."""
        with self._lock:
            current, self._switched = self._switched, None
        if current is not None:
            self._end(current)
        if name is not None:
            opened = self._begin(("", True, name, ""), "process")
            with self._lock:
                self._switched = opened

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Meter a run-wide phase (the whole process) through the block."""
        opened = self._begin(("", True, name, ""), "process")
        try:
            yield
        finally:
            self._end(opened)

    @contextmanager
    def family(self, name: str, env: str) -> Iterator[None]:
        """Meter one family measuring `env`, in the calling thread."""
        key = (env, False, "family", name) if self.by_environment else ("", True, "family", name)
        opened = self._begin(key, "thread")
        try:
            yield
        finally:
            self._end(opened)

    @contextmanager
    def landing(self, env: str) -> Iterator[None]:
        """Meter `env`'s rows being landed, in the calling thread (adds up over blocks)."""
        if not self.by_environment:
            yield  # inside `measure` anyway (a collection's rows wait for its batch's commit)
            return
        opened = self._begin((env, False, "landing", ""), "thread")
        try:
            yield
        finally:
            self._end(opened)

    def finish(self) -> CostRow:
        """End the phase `switch` began, and record `total`: the process (or this meter) from
        its origin until now."""
        self.switch(None)
        with self._lock:
            if self._start is not None:
                self._end_start()
            whole = _Open(("", True, "total", ""), "process", self.origin)
            self._fold_peak()
            # The whole process's peak, whatever was reset since.
            whole.peak_bytes = max(
                [row.peak_rss_bytes for row in self._rows.values()] + [_vm_hwm_bytes() or 0]
            )
            self._rows.pop(whole.key, None)
            return self._add(whole, self._reading("process"))

    # --- what was measured -----------------------------------------------------------------

    def rows(self) -> list[CostRow]:
        """Every row so far (copies): run-wide phases in RUN_PHASES order, then the
        environments' rows in the order they began."""
        with self._lock:
            return sorted(
                (CostRow(**vars(row)) for row in self._rows.values()),
                key=lambda r: (
                    RUN_PHASES.index(r.phase) if r.run_wide and r.phase in RUN_PHASES else 99,
                    r.started_at or datetime.min.replace(tzinfo=UTC),
                ),
            )

    def report_rows(self, phases: tuple[str, ...]) -> list[dict]:
        """Run-wide rows of `phases` measured so far, as the report shows this run's phases
        that are not in the warehouse yet (its own update, measured in this process)."""
        return [
            {**row.as_lake_row(), "in_process": True}
            for row in self.rows()
            if row.run_wide and row.phase in phases
        ]

    def take(self, carrier: str, phases: tuple[str, ...] | None = None) -> dict[str, pa.Table]:
        """The rows not landed yet (of `phases`, when given), as `tool_cost` tables by the
        environment they land under: an environment's own rows under it, run-wide rows under
        `carrier` (the run's first environment); marked landed."""
        by_env: dict[str, list[dict]] = {}
        with self._lock:
            for row in self._rows.values():
                if row.landed or (phases is not None and row.phase not in phases):
                    continue
                row.landed = True
                by_env.setdefault(row.env or carrier, []).append(row.as_lake_row())
        return {env: pa.Table.from_pylist(rows, schema=SCHEMA) for env, rows in by_env.items()}


class _NoMeter(Meter):
    """Where no run meters (a family called on its own): every block costs nothing."""

    def __init__(self) -> None:
        self._rows = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    @contextmanager
    def family(self, name: str, env: str) -> Iterator[None]:
        yield

    @contextmanager
    def landing(self, env: str) -> Iterator[None]:
        yield

    def watch(self, pid: int) -> None:
        pass

    def switch(self, name: str | None) -> None:
        pass

    def report_rows(self, phases: tuple[str, ...]) -> list[dict]:
        return []

    def finish(self) -> None:
        return None

    def rows(self) -> list[CostRow]:
        return []

    def take(self, carrier: str, phases: tuple[str, ...] | None = None) -> dict[str, pa.Table]:
        return {}


NO_METER = _NoMeter()
_CURRENT: ContextVar[Meter | None] = ContextVar("yardstick_meter", default=None)


def current() -> Meter:
    """The meter of the run this context belongs to (Prefect's task threads and the
    collection's threads run in copies of it), or one that meters nothing."""
    return _CURRENT.get() or NO_METER


@contextmanager
def metering(meter: Meter) -> Iterator[Meter]:
    """Make `meter` the current one through the block (and threads copying this context)."""
    token = _CURRENT.set(meter)
    try:
        yield meter
    finally:
        _CURRENT.reset(token)


def metered(by_environment: bool = True) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated function (a flow's body) with a new meter as the current one
    (`selfcost.current()` inside it); `by_environment` as Meter's."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def with_meter(*args: P.args, **kwargs: P.kwargs) -> R:
            with metering(Meter(by_environment=by_environment)):
                return fn(*args, **kwargs)

        return with_meter

    return decorate
