"""Intrinsic latency: `redis-cli --intrinsic-latency N` times what the OS steals from a tight
loop on this machine. It connects to nothing, so it only describes the server when the
prober runs on the server host."""

from __future__ import annotations

import os
import re

from prefect import task
from prefect.cache_policies import NO_CACHE

from yardstick.hostload import busy_share, cpu_times
from yardstick.profiles import IntrinsicProfile
from yardstick.schemas import to_table
from yardstick.tasks.base import Measured, utc_now
from yardstick.tools import find_tool, run_tool

MAX_RE = re.compile(r"Max latency so far: (\d+) microseconds")
TOTAL_RE = re.compile(
    r"(\d+) total runs \(avg latency: ([\d.]+) microseconds / ([\d.]+) nanoseconds per run\)"
)
WORST_RE = re.compile(r"Worst run took (\d+)x longer")


def parse_intrinsic(text: str) -> dict:
    """Read redis-cli's intrinsic-latency report: max µs, runs, average, worst ÷ average."""
    maxima = [int(m) for m in MAX_RE.findall(text)]
    total = TOTAL_RE.search(text)
    if not maxima or not total:
        raise ValueError("redis-cli --intrinsic-latency printed no summary")
    worst = WORST_RE.search(text)
    return {
        "max_us": float(maxima[-1]),
        "max_updates": len(maxima),
        "total_runs": int(total.group(1)),
        "avg_us_per_run": float(total.group(2)),
        "avg_ns_per_run": float(total.group(3)),
        "worst_over_avg_printed": float(worst.group(1)) if worst else None,
    }


@task(name="intrinsic-latency", cache_policy=NO_CACHE)
def intrinsic(profile: IntrinsicProfile) -> Measured:
    """Run the intrinsic-latency loop for `profile.duration_s` seconds on this machine."""
    tool = find_tool("redis-cli")
    if tool is None:  # the plan skips the family first; this guards direct calls
        raise RuntimeError("redis-cli not installed")
    started_at, cpu_before, load_before = utc_now(), cpu_times(), os.getloadavg()[0]
    text = run_tool(
        [tool.path, "--intrinsic-latency", str(profile.duration_s)],
        timeout_s=profile.duration_s + 30,
    )
    row = {
        **parse_intrinsic(text),
        "started_at": started_at,
        "duration_s": float(profile.duration_s),
        "host_busy_share": busy_share(cpu_before, cpu_times()),
        "load_1m_before": load_before,
        "tool_path": tool.path,
        "tool_version": tool.version_text,
    }
    return Measured(tables={"intrinsic": to_table("intrinsic", [row])}, window_s=profile.duration_s)
