"""How loaded the prober's machine was while one family ran: /proc/stat and /proc/loadavg
sampled on a thread through the family (not once at fingerprint time), as rows of a lake table.

The 1-minute load average lags by a minute, so each sample also keeps what answers within a
second: the run queue (/proc/stat procs_running, less the sampling thread itself), how much of
it is the prober's own process tree (its benchmark children, an embedded server: the
measurement's own load, the same every night), and the busy share of all cores since the
previous sample."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from yardstick.host.hostload import PROC_STAT, busy_share

PROC_LOADAVG = Path("/proc/loadavg")
# Often enough to see a burst of a second or two, rarely enough to cost nothing.
SAMPLE_EVERY_S = 0.5

# One row per sample: the lake table `family_load` (landed with every family's tables).
SCHEMA = pa.schema(
    [
        ("family", pa.string()),
        ("sample_idx", pa.int32()),
        ("sampled_at", pa.timestamp("us", tz="UTC")),
        ("interval_s", pa.float64()),  # since the previous sample (null: the first)
        ("busy_share", pa.float64()),  # of all cores' time since the previous sample, 0..1
        ("run_queue", pa.int32()),  # threads running or runnable now, the sampler left out
        # Of them, threads of the prober's own process tree (the measurement's own load).
        ("own_running", pa.int32()),
        ("load_1m", pa.float64()),
        ("cores", pa.int32()),
        # The prober ran on the server host: its load is the server host's load too.
        ("on_server_host", pa.bool_()),
    ]
)


def read_proc() -> tuple[tuple[int, int], int, float] | None:
    """((busy, total) jiffies, procs_running, 1-minute load average); None off Linux."""
    try:
        lines = PROC_STAT.read_text().splitlines()
        load_1m = float(PROC_LOADAVG.read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    values = [int(v) for v in lines[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    running = next((int(line.split()[1]) for line in lines if line.startswith("procs_running")), 0)
    return (sum(values) - idle, sum(values)), running, load_1m


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (/proc/<pid>/task/<tid>/children); [pid] where unreadable."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue  # gone meanwhile, or no children file: its own threads still count
    return found


def own_running(pid: int | None = None) -> int:
    """Threads of `pid`'s process tree (this process's by default) running or runnable now."""
    running = 0
    for member in _tree(pid or os.getpid()):
        try:
            tasks = list(Path(f"/proc/{member}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                # The state follows the command name's closing parenthesis.
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            running += state == "R"
    return running


class LoadSampler:
    """A context manager sampling the host every `every_s` from entry to exit (a sample at
    each end, so even a family of a few milliseconds has one interval)."""

    def __init__(self, family: str, on_server_host: bool, every_s: float = SAMPLE_EVERY_S):
        self.family, self.on_server_host, self.every_s = family, on_server_host, every_s
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"load-{family}", daemon=True)
        self._last: tuple[tuple[int, int], float] | None = None
        self._lock = threading.Lock()

    def _sample(self) -> None:
        """Append one sample (nothing off Linux)."""
        read = read_proc()
        if read is None:
            return
        times, running, load_1m = read
        own = own_running()
        now = time.perf_counter()
        with self._lock:
            previous = self._last
            self._last = (times, now)
            self.rows.append(
                {
                    "family": self.family,
                    "sample_idx": len(self.rows),
                    "sampled_at": datetime.now(UTC),
                    "interval_s": now - previous[1] if previous else None,
                    "busy_share": busy_share(previous[0], times) if previous else None,
                    # procs_running counts the thread reading it; so does our own tree.
                    "run_queue": max(running - 1, 0),
                    "own_running": min(max(own - 1, 0), max(running - 1, 0)),
                    "load_1m": load_1m,
                    "cores": os.cpu_count() or 1,
                    "on_server_host": self.on_server_host,
                }
            )

    def _loop(self) -> None:
        """Sample until stopped."""
        while not self._stop.wait(self.every_s):
            self._sample()

    def __enter__(self) -> LoadSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def table(self) -> pa.Table:
        """The samples taken so far, as the `family_load` table."""
        with self._lock:
            return pa.Table.from_pylist(list(self.rows), schema=SCHEMA)
