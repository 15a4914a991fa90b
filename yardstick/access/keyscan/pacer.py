"""Server-CPU pacing: the scan's share of the server's CPU (INFO used_cpu_sys + used_cpu_user,
less the baseline) kept within budget since the start and over any window, /proc as a check."""

from __future__ import annotations

import os
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from yardstick.access.keyscan.result import ScanError

# Pacing reads the CPU counters at most this often (INFO costs server time too), except in
# the first rounds, where the cost of a command is still unknown.
PACING_INFO_INTERVAL_S = 0.1
PACING_EARLY_ROUNDS = 8
# No window this long holds more than the budget's share of the server's CPU (the share
# since the start is kept too: a scan held back earlier does not make up for it in a burst).
PACING_WINDOW_S = 1.0
# "Longest burst": the highest CPU share over consecutive readings at least this far apart.
BURST_WINDOW_S = 0.1
# Slow start: the first SCAN asks this many keys, doubling each round up to scan_count, so
# that no large round is sent before the cost of a command has been measured.
SLOW_START_KEYS = 32
# Server CPU read from /proc (prober on the server's host) must agree this closely with INFO's
# to be taken as the same process.
PROC_AGREEMENT_S = 0.05

_CPU_RE = re.compile(r"^used_cpu_(?:sys|user):([0-9.]+)\s*$", re.MULTILINE)


def info_cpu_s(text: str) -> float:
    """used_cpu_sys + used_cpu_user of an INFO reply: the server process's CPU seconds."""
    values = _CPU_RE.findall(text)
    if len(values) != 2:
        raise ScanError("INFO cpu has no used_cpu_sys/used_cpu_user")
    return float(values[0]) + float(values[1])


def process_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of process `pid`, from /proc: schedstat (nanoseconds)
    where the kernel keeps it, else stat (clock ticks)."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks.iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_cpu_matching(pid: int, info_cpu: float) -> float | None:
    """The server process's CPU seconds from /proc, if process `pid` on this machine is the
    server (its CPU agrees with INFO's); None otherwise (another host, container, no /proc)."""
    try:
        proc = process_cpu_s(pid)
    except (OSError, ValueError, IndexError):
        return None
    return proc if abs(proc - info_cpu) <= PROC_AGREEMENT_S + 0.02 * info_cpu else None


@dataclass
class _Pacer:
    """Keeps the scan's CPU (the server's, less the baseline rate) within its share of the
    wall time since the start and of every sliding window."""

    share: float
    baseline_share: float
    start: float
    cpu_start_s: float
    times: list[float] = field(default_factory=list)  # readings: when
    own_s: list[float] = field(default_factory=list)  # the scan's CPU seconds by then
    covered: list[int] = field(default_factory=list)  # commands that reading covers
    commands_sent: int = 0
    last_info: float = float("-inf")
    rounds: int = 0

    def __post_init__(self) -> None:
        self.record(self.start, self.cpu_start_s, 0)

    def record(self, t: float, cpu_s: float, commands: int) -> None:
        """One reading of the server's CPU counters, covering `commands` sent so far."""
        own = cpu_s - self.cpu_start_s - self.baseline_share * (t - self.start)
        self.times.append(t)
        self.own_s.append(max(own, self.own_s[-1] if self.own_s else 0.0))
        self.covered.append(commands)

    def pause_s(self, now: float, commands_next: int) -> float:
        """How long to wait before sending a round of `commands_next` commands: what is
        known, plus the commands not yet covered at the cost per command measured so far."""
        own, covered = self.own_s[-1], self.covered[-1]
        per_command = own / covered if covered else 0.0
        projected = own + per_command * (self.commands_sent + commands_next - covered)
        ready = self.start + projected / self.share  # the share since the start
        excess = projected - self.share * PACING_WINDOW_S
        if excess > 0:  # the window ending at the send holds at most share × window
            i = bisect_left(self.own_s, excess)
            if i == len(self.own_s):
                reached = self.times[-1] + (excess - self.own_s[-1]) / self.share
            elif i == 0 or self.own_s[i] == self.own_s[i - 1]:
                reached = self.times[i]
            else:
                t0, t1, c0, c1 = self.times[i - 1], self.times[i], self.own_s[i - 1], self.own_s[i]
                reached = t0 + (excess - c0) / (c1 - c0) * (t1 - t0)
            ready = max(ready, reached + PACING_WINDOW_S)
        return ready - now

    def wants_info(self, now: float) -> bool:
        """Whether this round should read the counters."""
        if self.rounds < PACING_EARLY_ROUNDS or now - self.last_info >= PACING_INFO_INTERVAL_S:
            self.last_info = now
            return True
        return False

    def scan_count(self, limit: int) -> int:
        """COUNT for the next SCAN: small at first, doubling up to `limit`."""
        return min(limit, SLOW_START_KEYS << min(self.rounds, 20))

    def bursts(self) -> tuple[float | None, float | None, float | None]:
        """(highest CPU share over one burst window, that window's length, longest run of
        consecutive windows over the share) from the readings. A window runs from one reading
        to the first at least BURST_WINDOW_S later; a shorter tail joins the last window."""
        cuts = [0]
        for j in range(1, len(self.times)):
            if self.times[j] - self.times[cuts[-1]] >= BURST_WINDOW_S:
                cuts.append(j)
        if cuts[-1] != len(self.times) - 1:
            if len(cuts) > 1:
                cuts[-1] = len(self.times) - 1
            else:
                cuts.append(len(self.times) - 1)
        windows = []
        for i, j in pairwise(cuts):
            span = self.times[j] - self.times[i]
            if span > 0:
                windows.append((span, (self.own_s[j] - self.own_s[i]) / span))
        if not windows:
            return None, None, None
        peak_span, peak = max(windows, key=lambda w: w[1])
        longest = run = 0.0
        for span, share in windows:
            run = run + span if share > self.share else 0.0
            longest = max(longest, run)
        return peak, peak_span, longest
