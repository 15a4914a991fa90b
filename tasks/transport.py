"""Transport overhead: the same server reached two ways (direct, and through a forwarder,
proxy or TLS), measured in one run, interleaved A, B, A, B so slow drift cancels."""

from __future__ import annotations

import time
from contextlib import ExitStack

from prefect import task
from prefect.cache_policies import NO_CACHE

from yardstick.benchdb import empty_database
from yardstick.config import Environment
from yardstick.connect import open_client
from yardstick.profiles import ThroughputProfile, TransportProfile
from yardstick.schemas import to_table
from yardstick.tasks.base import Measured, utc_now
from yardstick.tasks.roundtrip import probe_socket, probe_window
from yardstick.tasks.throughput import run_cell
from yardstick.tool_auth import (
    ToolAuthUnavailable,
    ToolCredentials,
    leftovers_note,
    tool_credentials,
)
from yardstick.tools import find_tool


def _ping_round(env: Environment, window_s: float, interval_s: float) -> dict:
    """One PING window on `env`: exact mean and minimum RTT."""
    client = open_client(env, "transport")
    try:
        with probe_socket(client) as sock:
            rtts_us = probe_window(sock, window_s, interval_s)
    finally:
        client.close()
    return {
        "samples": len(rtts_us),
        "rtt_mean_us": sum(rtts_us) / len(rtts_us),
        "rtt_min_us": min(rtts_us),
    }


@task(name="transport", cache_policy=NO_CACHE)
def transport(
    forwarded: Environment,
    direct: Environment,
    profile: TransportProfile,
    throughput: ThroughputProfile,
    ping_interval_ms: float,
) -> Measured:
    """PING windows (and, on scratch pairs, single-client SET benchmarks) on both sides."""
    scratch = forwarded.mode == "scratch" and direct.mode == "scratch"
    tool = find_tool("redis-benchmark") if scratch else None
    # Back-to-back PINGs on scratch match redis-benchmark -c 1; read-only servers get the
    # round trip's gentler pace.
    interval_s = 0.0 if scratch else ping_interval_ms / 1000
    cell_profile = throughput.model_copy(update={"requests": profile.requests, "tests": ["set"]})
    rows: list[dict] = []
    notes: list[str] = []
    start = time.perf_counter()

    def measure_rounds(credentials: ToolCredentials | None) -> None:
        for round_idx in range(profile.rounds):
            for side, env in (("direct", direct), ("forwarded", forwarded)):
                row = {
                    "round": round_idx,
                    "side": side,
                    "env_measured": env.name,
                    "transport": env.transport_label,
                    "started_at": utc_now(),
                }
                row.update(_ping_round(env, profile.ping_window_s, interval_s))
                if tool is not None:
                    cell = {
                        "repetition": round_idx,
                        "clients": 1,
                        "pipeline": 1,
                        "payload_bytes": 3,
                    }
                    bench = run_cell(tool, env, cell_profile, cell, credentials)[0]
                    row["rps"] = bench.get("rps") if bench["status"] == "ok" else None
                    row["error"] = bench["error"]
                rows.append(row)

    if scratch:
        # Both sides are one server: one per-run user serves both, and both write into its
        # dedicated database: check it once, clean once.
        with ExitStack() as stack:
            credentials = None
            if tool is not None:
                try:
                    credentials = stack.enter_context(tool_credentials(direct, "transport"))
                except ToolAuthUnavailable as exc:
                    tool = None  # the PING rounds still compare the two paths
                    notes.append(f"benchmarks left out: {exc}")
            stack.enter_context(empty_database(direct, throughput.db, "transport", notes))
            measure_rounds(credentials)
            note = leftovers_note(credentials) if credentials else None
            notes.extend([note] if note else [])
    else:
        measure_rounds(None)
    return Measured(
        tables={"transport": to_table("transport", rows)},
        window_s=time.perf_counter() - start,
        notes=notes,
    )
