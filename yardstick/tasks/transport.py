"""Transport overhead: the same server reached two ways (direct, and through a forwarder,
proxy or TLS), measured in one run, interleaved A, B, A, B so slow drift cancels."""

from __future__ import annotations

import functools
import time
from contextlib import ExitStack

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from yardstick import interrupt
from yardstick.access.benchdb import empty_database
from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.probe import probe_socket, probe_window
from yardstick.host.tool_auth import (
    ToolAuthUnavailable,
    ToolCredentials,
    leftovers_note,
    tool_credentials,
)
from yardstick.host.tools import find_tool
from yardstick.tasks import base
from yardstick.tasks.base import UTC_TS, Family, Measured, RunContext, Skipped, utc_now
from yardstick.tasks.throughput import ThroughputProfile, run_cell


class TransportProfile(BaseModel):
    """Interleaved A, B, A, B single-client runs on a same_server_as pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: int = 2
    requests: int = 5_000
    ping_window_s: float = 0.5


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # Same server, two paths: one row per round and side (landed under the forwarded env).
    "transport": pa.schema(
        [
            ("round", pa.int32()),
            ("side", pa.string()),  # direct | forwarded
            ("env_measured", pa.string()),
            ("transport", pa.string()),
            ("started_at", UTC_TS),
            ("samples", pa.int64()),
            ("rtt_mean_us", pa.float64()),
            ("rtt_min_us", pa.float64()),
            ("rps", pa.float64()),  # single-client SET; scratch pairs only
            ("error", pa.string()),
        ]
    ),
}


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
    notes: list[str] = []
    if scratch and (direct.cluster or forwarded.cluster):
        # A cluster node has database 0 only, beside other keys: no dedicated database to
        # load and empty (throughput loads a cluster as a whole, under its claims).
        scratch, tool = False, None
        notes.append("benchmarks left out: a cluster has no dedicated database (PING only)")
    cell_profile = throughput.model_copy(update={"requests": profile.requests, "tests": ["set"]})
    rows: list[dict] = []
    start = time.perf_counter()
    progress = base.progress()
    progress.plan(profile.rounds, "rounds")

    def finished(count: int, window_s: float) -> Measured:
        """The Measured of the first `count` rows: whole rounds (both sides) only."""
        return Measured(
            tables={"transport": FAMILY.table("transport", rows[:count])},
            window_s=window_s,
            notes=notes,
        )

    def measure_rounds(credentials: ToolCredentials | None) -> None:
        longest_s: float | None = None
        for round_idx in range(profile.rounds):
            interrupt.check()
            # A round starts only when both its sides can finish within the family's bound.
            if not interrupt.fits(longest_s):
                progress.skip("round", interrupt.wont_fit())
                continue
            round_start = time.perf_counter()
            failed: list[str] = []
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
                    if bench["status"] != "ok":
                        failed.append(f"{side}: {bench['error']}")
                rows.append(row)
            longest_s = max(longest_s or 0.0, time.perf_counter() - round_start)
            window_s = time.perf_counter() - start
            snapshot = functools.partial(finished, len(rows), window_s)
            if failed:
                # Its PINGs land, but the throughput ratio has no pair: the round is counted
                # as dropped (the step partial, "2 of 3 rounds"), never silently left out.
                progress.drop(f"round {round_idx + 1}", "; ".join(failed), snapshot)
            else:
                progress.finished(snapshot)

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
        tables={"transport": FAMILY.table("transport", rows)},
        window_s=time.perf_counter() - start,
        notes=notes,
    )


def _paired(env: Environment) -> str | None:
    """Transport overhead needs a same_server_as partner."""
    return None if env.same_server_as else "no same_server_as partner declared"


def _arguments(env: Environment, profile, ctx: RunContext) -> tuple:
    """Pair `env` with the environment it shares a server with, if that one is in the run."""
    direct = ctx.peers.get(env.same_server_as or "")
    if direct is None:
        raise Skipped(f"partner {env.same_server_as!r} is not part of this run")
    return env, direct, profile.transport, profile.throughput, profile.round_trip.interval_ms


FAMILY = Family(
    name="transport",
    phase="load",
    scope="environment",
    measure=transport,
    arguments=_arguments,
    tables=TABLES,
    settings=TransportProfile,
    presets={"nightly": TransportProfile(rounds=3, requests=50_000, ping_window_s=2.0)},
    applies=_paired,
    # It replays the throughput matrix's cells and the round trip's PING pacing.
    params=lambda p: {
        "transport": p.transport,
        "throughput": p.throughput,
        "interval_ms": p.round_trip.interval_ms,
    },
)
