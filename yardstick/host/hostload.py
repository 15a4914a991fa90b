"""How busy this machine was during a measurement: /proc/stat CPU time, read before and after."""

from __future__ import annotations

from pathlib import Path

PROC_STAT = Path("/proc/stat")


def cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs since boot; None off Linux."""
    try:
        fields = PROC_STAT.read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Share of all CPU time that was busy between two readings (0..1)."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])
