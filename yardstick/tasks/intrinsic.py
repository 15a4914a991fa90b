"""Intrinsic latency: `redis-cli --intrinsic-latency N` times what the OS steals from a tight
loop on this machine. It connects to nothing, so it only describes the server when the
prober runs on the server host."""

from __future__ import annotations

import os
import re

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from yardstick.host.hostload import busy_share, cpu_times
from yardstick.host.tools import find_tool, run_tool
from yardstick.tasks.base import UTC_TS, Family, Measured, utc_now


class IntrinsicProfile(BaseModel):
    """`redis-cli --intrinsic-latency duration_s` on the server host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    duration_s: int = 1


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # redis-cli --intrinsic-latency: one row per run on the server host.
    "intrinsic": pa.schema(
        [
            ("started_at", UTC_TS),
            ("duration_s", pa.float64()),
            ("max_us", pa.float64()),
            ("max_updates", pa.int64()),
            ("total_runs", pa.int64()),
            ("avg_us_per_run", pa.float64()),
            ("avg_ns_per_run", pa.float64()),
            ("worst_over_avg_printed", pa.float64()),
            ("host_busy_share", pa.float64()),
            ("load_1m_before", pa.float64()),
            ("tool_path", pa.string()),
            ("tool_version", pa.string()),
        ]
    ),
}


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
    return Measured(
        tables={"intrinsic": FAMILY.table("intrinsic", [row])}, window_s=profile.duration_s
    )


FAMILY = Family(
    name="intrinsic",
    phase="machine",
    scope="environment",
    measure=intrinsic,
    task_name="intrinsic-latency",
    arguments=lambda env, profile, ctx: (profile.intrinsic,),
    tables=TABLES,
    settings=IntrinsicProfile,
    presets={"nightly": IntrinsicProfile(duration_s=10)},
    needs_server_host=True,
    tool="redis-cli",
)
