"""Latency monitor: LATENCY LATEST, LATENCY HISTORY per event and LATENCY DOCTOR's text.

It answers what the SLOWLOG cannot: when the server stalled for reasons that are not
commands (fork, AOF fsync, expiry cycles). A threshold of 0 means it records nothing.

Each event's history (one sample per second, up to 160) is read whole but landed from the
newest sample the lake already holds (yardstick/tasks/base.Landed) on: that one again, because Redis
raises the current second's sample in place (src/latency.c, latencyAddSample)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import redis

from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.slowlog_parse import parse_latency_history, parse_latency_latest, text
from yardstick.tasks.base import UTC_TS, Family, Landed, Measured, utc_now
from yardstick.tasks.slowlog import config_value, server_identity

# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # One row per collection: the monitor's threshold, its event count, LATENCY DOCTOR.
    "latency_collections": pa.schema(
        [
            ("server_run_id", pa.string()),
            ("collected_at", UTC_TS),
            ("threshold_ms", pa.int64()),  # 0: the monitor is off
            ("events", pa.int32()),
            ("doctor_text", pa.string()),  # LATENCY DOCTOR, kept as text
            ("error", pa.string()),
        ]
    ),
    # LATENCY LATEST: one row per event the monitor holds, at each collection.
    "latency_latest": pa.schema(
        [
            ("server_run_id", pa.string()),
            ("event", pa.string()),
            ("latest_at", UTC_TS),
            ("latest_ms", pa.int64()),
            ("max_ms", pa.int64()),  # all-time worst since the server started or reset
            # This event's history was landed from this sample on (null: all of it), and its
            # newest sample read (null: no history read): the next collection's cursor.
            ("history_landed_from", UTC_TS),
            ("history_newest_at", UTC_TS),
        ]
    ),
    # One sample per event per second (the worst of that second), up to 160 per event: those
    # from the cursor on (a sample recurs at the cursor, or after a lost cursor).
    "latency_history": pa.schema(
        [
            ("server_run_id", pa.string()),
            ("event", pa.string()),
            ("sampled_at", UTC_TS),
            ("latency_ms", pa.int64()),
        ]
    ),
}


def _at(unix_s: int) -> datetime:
    """A Redis unix timestamp as an aware UTC datetime."""
    return datetime.fromtimestamp(unix_s, UTC)


def samples_to_land(
    samples: list[tuple[int, int]], since: datetime | None
) -> tuple[list[tuple[int, int]], datetime | None]:
    """The samples from the first one at or after `since` on (None: all), in the server's order
    (oldest first), and the cursor kept: None when no sample reaches it (LATENCY RESET, or the
    server's clock set back: the series is not the one landed, so all of it is landed)."""
    if since is None:
        return samples, None
    for i, (sampled_at_s, _) in enumerate(samples):
        if _at(sampled_at_s) >= since:
            # Every later sample lands too, whatever its time: an earlier one can follow only
            # after the clock went back, and it is new.
            return samples[i:], since
    return samples, None


def collect_latency(env: Environment, landed: Landed | None = None) -> Measured:
    """Read the monitor's threshold, latest spikes, per-event history and doctor text; land
    each event's history from what the lake holds (`landed`; None: all of it) on."""
    client = open_client(env, "latency")
    latest_rows: list[dict] = []
    history_rows: list[dict] = []
    doctor, error = None, None
    try:
        identity = server_identity(client)
        threshold_ms = config_value(client, "latency-monitor-threshold")
        try:
            events = parse_latency_latest(client.execute_command("LATENCY", "LATEST"))
            for event in events:
                row = {
                    "server_run_id": identity.run_id,
                    "event": event.event,
                    "latest_at": _at(event.latest_at_s),
                    "latest_ms": event.latest_ms,
                    "max_ms": event.max_ms,
                    "history_landed_from": None,
                    "history_newest_at": None,
                }
                # Appended before its history is read, as before: an ACL that allows LATEST
                # but not HISTORY still lands the latest spikes (with no cursor).
                latest_rows.append(row)
                since = landed.latency_at.get((identity.run_id, event.event)) if landed else None
                samples = parse_latency_history(
                    client.execute_command("LATENCY", "HISTORY", event.event)
                )
                kept, since = samples_to_land(samples, since)
                row["history_landed_from"] = since
                if samples:
                    row["history_newest_at"] = _at(max(at_s for at_s, _ in samples))
                for sampled_at_s, latency_ms in kept:
                    history_rows.append(
                        {
                            "server_run_id": identity.run_id,
                            "event": event.event,
                            "sampled_at": _at(sampled_at_s),
                            "latency_ms": latency_ms,
                        }
                    )
            # Kept as text: its wording changes between versions and it is advice, not data.
            doctor = text(client.execute_command("LATENCY", "DOCTOR"))
        except redis.exceptions.ResponseError as exc:
            # Managed services may rename or forbid LATENCY: say so in the report.
            error = f"LATENCY unavailable: {exc}"
        collected_at = utc_now()
    finally:
        client.close()
    collection = {
        "server_run_id": identity.run_id,
        "collected_at": collected_at,
        "threshold_ms": threshold_ms,
        "events": len(latest_rows),
        "doctor_text": doctor,
        "error": error,
    }
    return Measured(
        # Landed in this order: a latency_latest row (the next cursor) in the lake means its
        # history is there too (a landing that fails stops there).
        tables={
            "latency_history": FAMILY.table("latency_history", history_rows),
            "latency_latest": FAMILY.table("latency_latest", latest_rows),
            "latency_collections": FAMILY.table("latency_collections", [collection]),
        },
        notes=[landed.problem] if landed is not None and landed.problem else [],
    )


FAMILY = Family(
    name="latency_monitor",
    phase="collection",
    measure=collect_latency,
    retries=1,
    retry_delay_s=1.0,
    # What the lake holds is read here, when the family starts (the host's lock held).
    arguments=lambda env, profile, ctx: (env, ctx.landed_of(env)),
    tables=TABLES,
    collected=True,
)
