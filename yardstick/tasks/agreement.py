"""Instrument agreement (scratch only): one SORT timed from outside, by its SLOWLOG entry and by
the latency monitor (threshold raised for the experiment, set back afterwards).

The latency monitor keeps one sample per second (the worst), so each repetition runs in a
second of its own and is matched to the sample of the second its SLOWLOG entry names."""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime

import pyarrow as pa
import redis
from pydantic import BaseModel, ConfigDict

from yardstick import interrupt
from yardstick.access.connect import client_name, open_client
from yardstick.access.environment import Environment
from yardstick.access.scratch import build_list, config_changes, fixture_keys, require_scratch
from yardstick.access.slowlog_parse import parse_latency_history
from yardstick.tasks import base
from yardstick.tasks.base import UTC_TS, Family, Measured, utc_now
from yardstick.tasks.slowlog import (
    SPAN_SCHEMA,
    ServerIdentity,
    SlowlogSpan,
    find_own_entry,
    newest_entry_id,
    server_identity,
    slowlog_span,
)


class AgreementProfile(BaseModel):
    """One SORT seen by three instruments: outside timing, SLOWLOG, LATENCY."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    list_len: int = 50_000
    repetitions: int = 1
    latency_threshold_ms: int = 1


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # The SLOWLOG ids and time the experiment occupied (slowlog.SPAN_SCHEMA).
    "agreement_span": SPAN_SCHEMA,
    # One SORT per repetition, seen by three instruments.
    "agreement": pa.schema(
        [
            ("server_run_id", pa.string()),
            ("rep_idx", pa.int32()),
            ("list_len", pa.int64()),
            ("client_us", pa.float64()),
            ("entry_id", pa.int64()),
            ("slowlog_us", pa.int64()),
            ("logged_at", UTC_TS),
            ("latency_ms", pa.int64()),  # the monitor's sample of that second
            ("latency_sampled_at", UTC_TS),
            ("latency_threshold_ms", pa.int64()),
            ("latency_threshold_before_ms", pa.int64()),
            ("measured_at", UTC_TS),
        ]
    ),
}


ROLE = "agreement"


def _history(client: redis.Redis) -> dict[int, int]:
    """LATENCY HISTORY of the `command` event as {unix second: worst ms}."""
    return dict(parse_latency_history(client.execute_command("LATENCY", "HISTORY", "command")))


def _wait_for_fresh_second(client: redis.Redis) -> None:
    """Sleep until the server's clock enters a second with no `command` sample yet."""
    seconds, micros = client.time()
    if seconds in _history(client):
        interrupt.sleep(1 - micros / 1e6 + 0.01)


def _one_sort(client: redis.Redis, args: list[str], rep_idx: int, last_id: int | None) -> dict:
    """Run the SORT once; read its SLOWLOG entry and its latency-monitor sample."""
    _wait_for_fresh_second(client)
    start = time.perf_counter_ns()
    client.execute_command(*args)
    client_us = (time.perf_counter_ns() - start) / 1000
    entry = find_own_entry(client, args, client_name(ROLE), last_id)
    history = _history(client)
    sample_s = None
    if entry is not None:
        # Both clocks are read when the command ends; a second boundary may fall between.
        sample_s = next(
            (
                s
                for s in (entry.logged_at_s, entry.logged_at_s + 1, entry.logged_at_s - 1)
                if s in history
            ),
            None,
        )
    return {
        "rep_idx": rep_idx,
        "client_us": client_us,
        "entry_id": entry.entry_id if entry else None,
        "slowlog_us": entry.duration_us if entry else None,
        "logged_at": datetime.fromtimestamp(entry.logged_at_s, UTC) if entry else None,
        "latency_ms": history.get(sample_s) if sample_s is not None else None,
        "latency_sampled_at": datetime.fromtimestamp(sample_s, UTC) if sample_s else None,
    }


def agreement(env: Environment, profile: AgreementProfile) -> Measured:
    """Time SORT ... ALPHA LIMIT 0 10 with three instruments, `repetitions` times."""
    require_scratch(env)
    client = open_client(env, ROLE)
    rows: list[dict] = []
    progress = base.progress()
    progress.plan(profile.repetitions, "repetitions")

    def finished(count: int, window_s: float) -> Measured:
        """The Measured of the first `count` repetitions (called once the span is closed)."""
        return _measured(rows[:count], identity, profile, original, span, window_s)

    try:
        identity = server_identity(client)
        with fixture_keys(client, env) as prefix:
            key = f"{prefix}list"
            build_list(client, key, profile.list_len)
            args = ["SORT", key, "ALPHA", "LIMIT", "0", "10"]
            changes = {
                "slowlog-log-slower-than": 0,
                "latency-monitor-threshold": profile.latency_threshold_ms,
            }
            with slowlog_span(client, "agreement", identity.run_id) as span:
                with config_changes(client, env, changes) as original:
                    start = time.perf_counter()
                    last_id = newest_entry_id(client)
                    longest_s: float | None = None
                    for rep_idx in range(profile.repetitions):
                        interrupt.check()
                        # A repetition starts only when it can finish within the bound.
                        if not interrupt.fits(longest_s):
                            progress.skip("SORT", interrupt.wont_fit())
                            continue
                        rep_start = time.perf_counter()
                        row = _one_sort(client, args, rep_idx, last_id)
                        last_id = row["entry_id"] if row["entry_id"] is not None else last_id
                        rows.append(row)
                        longest_s = max(longest_s or 0.0, time.perf_counter() - rep_start)
                        window_s = time.perf_counter() - start
                        progress.finished(functools.partial(finished, len(rows), window_s))
                    window_s = time.perf_counter() - start
    finally:
        client.close()
    return _measured(rows, identity, profile, original, span, window_s)


def _measured(
    rows: list[dict],
    identity: ServerIdentity,
    profile: AgreementProfile,
    original: dict,
    span: SlowlogSpan,
    window_s: float,
) -> Measured:
    """The family's Measured of these repetitions and the span they ran in."""
    rows = [
        {
            **row,
            "server_run_id": identity.run_id,
            "list_len": profile.list_len,
            "latency_threshold_ms": profile.latency_threshold_ms,
            "latency_threshold_before_ms": int(original["latency-monitor-threshold"]),
            "measured_at": utc_now(),
        }
        for row in rows
    ]
    return Measured(
        tables={
            "agreement": FAMILY.table("agreement", rows),
            "agreement_span": FAMILY.table("agreement_span", [span.row()]),
        },
        window_s=window_s,
    )


FAMILY = Family(
    name="agreement",
    phase="experiments",
    scope="experiment",
    measure=agreement,
    arguments=lambda env, profile, ctx: (env, profile.agreement),
    tables=TABLES,
    settings=AgreementProfile,
    presets={"nightly": AgreementProfile(list_len=200_000, repetitions=3)},
    scratch_only=True,
)
