"""Latency monitor: LATENCY LATEST, LATENCY HISTORY per event and LATENCY DOCTOR's text.

It answers what the SLOWLOG cannot: when the server stalled for reasons that are not
commands (fork, AOF fsync, expiry cycles). A threshold of 0 means it records nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import redis
from prefect import task
from prefect.cache_policies import NO_CACHE

from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.slowlog_parse import parse_latency_history, parse_latency_latest, text
from yardstick.tasks.base import UTC_TS, Family, Measured, utc_now
from yardstick.tasks.slowlog import config_value, server_identity

# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
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
    "latency_latest": pa.schema(
        [
            ("server_run_id", pa.string()),
            ("event", pa.string()),
            ("latest_at", UTC_TS),
            ("latest_ms", pa.int64()),
            ("max_ms", pa.int64()),  # all-time worst since the server started or reset
        ]
    ),
    # One sample per event per second (the worst of that second), up to 160 per event.
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


@task(name="latency-monitor", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1)
def collect_latency(env: Environment) -> Measured:
    """Read the monitor's threshold, latest spikes, per-event history and doctor text."""
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
                latest_rows.append(
                    {
                        "server_run_id": identity.run_id,
                        "event": event.event,
                        "latest_at": _at(event.latest_at_s),
                        "latest_ms": event.latest_ms,
                        "max_ms": event.max_ms,
                    }
                )
                for sampled_at_s, latency_ms in parse_latency_history(
                    client.execute_command("LATENCY", "HISTORY", event.event)
                ):
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
        tables={
            "latency_collections": FAMILY.table("latency_collections", [collection]),
            "latency_latest": FAMILY.table("latency_latest", latest_rows),
            "latency_history": FAMILY.table("latency_history", history_rows),
        }
    )


FAMILY = Family(
    name="latency_monitor",
    phase="collection",
    task=collect_latency,
    arguments=lambda env, profile, ctx: (env,),
    tables=TABLES,
    collected=True,
)
