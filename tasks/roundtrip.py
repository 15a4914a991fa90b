"""Round trip: a lean PING probe in windows, with INFO commandstats read around each window.

The client sees network + client + Redis; the counter difference says how much of it
was Redis. Every RTT lands in a log-bucketed histogram so percentiles stay real when
windows are pooled (no averages of averages)."""

from __future__ import annotations

import math
import socket
import time
from array import array
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from prefect import task
from prefect.cache_policies import NO_CACHE

from yardstick import interrupt
from yardstick.config import Environment
from yardstick.connect import open_client
from yardstick.guard import check_read_only
from yardstick.hostload import busy_share, cpu_times
from yardstick.info import parse_commandstats, parse_latencystats
from yardstick.profiles import RoundTripProfile
from yardstick.schemas import to_table
from yardstick.tasks.base import Measured, utc_now

# Pre-encoded request: encoding PING per sample would be measured as latency.
PING_REQUEST = b"*1\r\n$4\r\nPING\r\n"
PONG_REPLY = b"+PONG\r\n"
# Bucket edges grow by 2 %: any percentile read from the histogram is within 2 %.
BUCKET_GROWTH = 1.02
_LOG_GROWTH = math.log(BUCKET_GROWTH)
MIN_RTT_US = 0.01


class ProbeError(Exception):
    """The server answered a PING with something other than PONG."""


def bucket_of(rtt_us: float) -> int:
    """Histogram bucket index of one RTT."""
    return math.floor(math.log(max(rtt_us, MIN_RTT_US)) / _LOG_GROWTH)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """Lower and upper edge (µs) of a bucket."""
    return BUCKET_GROWTH**bucket, BUCKET_GROWTH ** (bucket + 1)


def probe_window(sock, window_s: float, interval_s: float) -> array:
    """Send PING and time each reply until `window_s` has passed; RTTs in µs."""
    interrupt.check()  # once a window: a stop request waits at most one window
    rtts_us = array("d")
    deadline_ns = time.perf_counter_ns() + int(window_s * 1e9)
    while True:
        start_ns = time.perf_counter_ns()
        sock.sendall(PING_REQUEST)
        reply = sock.recv(64)
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(64)
            if not chunk:
                raise ProbeError("connection closed during PING")
            reply += chunk
        end_ns = time.perf_counter_ns()
        if reply != PONG_REPLY:
            raise ProbeError(f"PING answered {reply[:60]!r}")
        rtts_us.append((end_ns - start_ns) / 1000)
        if end_ns >= deadline_ns:
            return rtts_us
        if interval_s > 0:
            time.sleep(interval_s)


@contextmanager
def probe_socket(client: redis.Redis) -> Iterator[socket.socket]:
    """A dedicated connection from the client's pool, as a raw socket for the lean probe.

    redis-py does AUTH, TLS, SELECT and CLIENT SETNAME on connect; the probe then writes its
    pre-encoded PINGs on the socket directly."""
    conn = client.connection_pool.get_connection()
    try:
        conn.connect()
        yield conn._sock  # noqa: SLF001 - the lean probe needs the raw socket
    finally:
        client.connection_pool.release(conn)


def histogram_rows(window_idx: int, rtts_us: array) -> list[dict]:
    """One row per non-empty bucket of a window's RTTs."""
    counts = Counter(bucket_of(rtt) for rtt in rtts_us)
    rows = []
    for bucket, count in sorted(counts.items()):
        low_us, high_us = bucket_bounds(bucket)
        rows.append(
            {
                "window_idx": window_idx,
                "bucket": bucket,
                "low_us": low_us,
                "high_us": high_us,
                "count": count,
            }
        )
    return rows


def commandstats_rows(client: redis.Redis, window_idx: int, phase: str) -> list[dict]:
    """Snapshot INFO commandstats as rows (counters are differenced in SQL, never reset)."""
    taken_at = utc_now()
    return [
        {
            "window_idx": window_idx,
            "phase": phase,
            "taken_at": taken_at,
            "command": s.command,
            "calls": s.calls,
            "usec": s.usec,
            "rejected_calls": s.rejected_calls,
            "failed_calls": s.failed_calls,
        }
        for s in parse_commandstats(client.info("commandstats"))
    ]


def latencystats_rows(client: redis.Redis, window_idx: int) -> list[dict]:
    """Snapshot INFO latencystats (cumulative server percentiles; empty before Redis 7.0)."""
    taken_at = utc_now()
    return [
        {
            "window_idx": window_idx,
            "taken_at": taken_at,
            "command": p.command,
            "percentile": p.percentile,
            "latency_us": p.latency_us,
        }
        for p in parse_latencystats(client.info("latencystats"))
    ]


@task(name="round-trip", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1)
def round_trip(env: Environment, profile: RoundTripProfile) -> Measured:
    """PING windows with commandstats snapshots around each; raw aggregates and histograms."""
    if env.mode == "read-only":
        # The probe writes pre-encoded bytes on the socket; they still pass the guard.
        check_read_only(("PING",))
    client = open_client(env, "roundtrip")
    windows, histogram, counters, percentiles = [], [], [], []
    window_s_total = 0.0
    try:
        with probe_socket(client) as sock:
            for window_idx in range(profile.windows):
                counters += commandstats_rows(client, window_idx, "before")
                started_at, cpu_before = utc_now(), cpu_times()
                start = time.perf_counter()
                rtts_us = probe_window(sock, profile.window_s, profile.interval_ms / 1000)
                elapsed_s = time.perf_counter() - start
                cpu_after = cpu_times()
                counters += commandstats_rows(client, window_idx, "after")
                percentiles += latencystats_rows(client, window_idx)
                window_s_total += elapsed_s
                windows.append(
                    {
                        "window_idx": window_idx,
                        "started_at": started_at,
                        "window_s": elapsed_s,
                        "interval_ms": profile.interval_ms,
                        "samples": len(rtts_us),
                        "rtt_min_us": min(rtts_us),
                        "rtt_max_us": max(rtts_us),
                        "rtt_mean_us": sum(rtts_us) / len(rtts_us),
                        # The prober's machine; it is the server's only when the prober is local.
                        "host_busy_share": busy_share(cpu_before, cpu_after),
                    }
                )
                histogram += histogram_rows(window_idx, rtts_us)
    finally:
        client.close()
    return Measured(
        tables={
            "ping_windows": to_table("ping_windows", windows),
            "ping_histogram": to_table("ping_histogram", histogram),
            "commandstats": to_table("commandstats", counters),
            "latencystats": to_table("latencystats", percentiles),
        },
        window_s=window_s_total,
    )
