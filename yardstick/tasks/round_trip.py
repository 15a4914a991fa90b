"""Round trip: a lean PING probe in windows, with INFO commandstats read around each window.

The client sees network + client + Redis; the counter difference says how much of it
was Redis. Every RTT lands in a log-bucketed histogram so percentiles stay real when
windows are pooled (no averages of averages)."""

from __future__ import annotations

import functools
import time
from array import array
from collections import Counter

import pyarrow as pa
import redis
from pydantic import BaseModel, ConfigDict

from yardstick import interrupt
from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.guard import check_read_only
from yardstick.access.info import parse_commandstats, parse_latencystats
from yardstick.access.probe import bucket_bounds, bucket_of, probe_socket, probe_window
from yardstick.host.hostload import busy_share, cpu_times
from yardstick.tasks import base
from yardstick.tasks.base import COMMANDSTATS_COUNTERS, UTC_TS, Family, Measured, utc_now


class RoundTripProfile(BaseModel):
    """PING probe windows, like `redis-cli --latency-history -i window_s`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    windows: int = 3
    window_s: float = 1.0
    # Pause between PINGs: the probe is load too; 1 ms keeps it under ~1000 PING/s.
    interval_ms: float = 1.0


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # PING probe windows: exact per-window aggregates of every sample.
    "ping_windows": pa.schema(
        [
            ("window_idx", pa.int32()),
            ("started_at", UTC_TS),
            ("window_s", pa.float64()),
            ("interval_ms", pa.float64()),
            ("samples", pa.int64()),
            ("rtt_min_us", pa.float64()),
            ("rtt_max_us", pa.float64()),
            ("rtt_mean_us", pa.float64()),
            ("host_busy_share", pa.float64()),  # prober machine's CPU busy share
        ]
    ),
    # Log-bucketed histogram of every PING RTT in a window; percentiles come from here.
    "ping_histogram": pa.schema(
        [
            ("window_idx", pa.int32()),
            ("bucket", pa.int32()),
            ("low_us", pa.float64()),
            ("high_us", pa.float64()),
            ("count", pa.int64()),
        ]
    ),
    # INFO latencystats after each window (7.0+): cumulative since the server's stats began.
    "latencystats": pa.schema(
        [
            ("window_idx", pa.int32()),
            ("taken_at", UTC_TS),
            ("command", pa.string()),
            ("percentile", pa.float64()),
            ("latency_us", pa.float64()),
        ]
    ),
    # INFO commandstats counters taken just before and just after each window.
    "commandstats": pa.schema(
        [
            ("window_idx", pa.int32()),
            ("phase", pa.string()),  # before | after
            ("taken_at", UTC_TS),
            *COMMANDSTATS_COUNTERS,
        ]
    ),
}


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


def round_trip(env: Environment, profile: RoundTripProfile) -> Measured:
    """PING windows with commandstats snapshots around each; raw aggregates and histograms."""
    if env.mode == "read-only":
        # The probe writes pre-encoded bytes on the socket; they still pass the guard.
        check_read_only(("PING",))
    client = open_client(env, "roundtrip")
    windows: list[dict] = []
    histogram: list[dict] = []
    counters: list[dict] = []
    percentiles: list[dict] = []
    window_s_total = 0.0
    progress = base.progress()
    progress.plan(profile.windows, "windows")

    def finished(counts: tuple[int, int, int, int], window_s: float) -> Measured:
        """The Measured of the windows finished when these were the row counts."""
        n_windows, n_histogram, n_counters, n_percentiles = counts
        return _measured(
            windows[:n_windows],
            histogram[:n_histogram],
            counters[:n_counters],
            percentiles[:n_percentiles],
            window_s,
        )

    try:
        with probe_socket(client) as sock:
            for window_idx in range(profile.windows):
                interrupt.check()
                # A window starts only when it (and its INFO reads) can end within the bound.
                if not interrupt.fits(profile.window_s):
                    progress.skip("window", interrupt.wont_fit())
                    continue
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
                counts = (len(windows), len(histogram), len(counters), len(percentiles))
                progress.finished(functools.partial(finished, counts, window_s_total))
    finally:
        client.close()
    return _measured(windows, histogram, counters, percentiles, window_s_total)


def _measured(
    windows: list[dict],
    histogram: list[dict],
    counters: list[dict],
    percentiles: list[dict],
    window_s_total: float,
) -> Measured:
    """The family's Measured of these rows (whole windows)."""
    return Measured(
        tables={
            "ping_windows": FAMILY.table("ping_windows", windows),
            "ping_histogram": FAMILY.table("ping_histogram", histogram),
            "commandstats": FAMILY.table("commandstats", counters),
            "latencystats": FAMILY.table("latencystats", percentiles),
        },
        window_s=window_s_total,
    )


FAMILY = Family(
    name="round_trip",
    phase="round_trip",
    measure=round_trip,
    retries=1,
    retry_delay_s=1.0,
    arguments=lambda env, profile, ctx: (env, profile.round_trip),
    tables=TABLES,
    settings=RoundTripProfile,
    presets={
        "quick": RoundTripProfile(windows=3, window_s=1.0, interval_ms=1.0),
        "nightly": RoundTripProfile(windows=5, window_s=5.0, interval_ms=1.0),
    },
    detail_tables=("ping_histogram",),
)
