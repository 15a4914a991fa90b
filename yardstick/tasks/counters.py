"""Commandstats over time: one INFO commandstats snapshot per run, tagged with the server run.

Counters are never reset (no CONFIG RESETSTAT, read-only environments included): SQL
differences consecutive snapshots of the same server run into calls/s and µs per call."""

from __future__ import annotations

import pyarrow as pa

from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.info import parse_commandstats
from yardstick.tasks.base import COMMANDSTATS_COUNTERS, UTC_TS, Family, Measured, utc_now
from yardstick.tasks.slowlog import server_identity

# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # INFO commandstats once per run; consecutive snapshots of one server run are
    # differenced in SQL (never reset).
    "commandstats_snapshots": pa.schema(
        [
            ("server_run_id", pa.string()),
            ("uptime_s", pa.int64()),
            ("taken_at", UTC_TS),
            *COMMANDSTATS_COUNTERS,
        ]
    ),
}


def snapshot_counters(env: Environment) -> Measured:
    """INFO commandstats with the server run id and uptime that make two snapshots comparable."""
    client = open_client(env, "counters")
    try:
        identity = server_identity(client)
        stats = parse_commandstats(client.info("commandstats"))
        taken_at = utc_now()
    finally:
        client.close()
    rows = [
        {
            "server_run_id": identity.run_id,
            "uptime_s": identity.uptime_s,
            "taken_at": taken_at,
            "command": s.command,
            "calls": s.calls,
            "usec": s.usec,
            "rejected_calls": s.rejected_calls,
            "failed_calls": s.failed_calls,
        }
        for s in stats
    ]
    return Measured(tables={"commandstats_snapshots": FAMILY.table("commandstats_snapshots", rows)})


FAMILY = Family(
    name="counters",
    phase="collection",
    measure=snapshot_counters,
    retries=1,
    retry_delay_s=1.0,
    arguments=lambda env, profile, ctx: (env,),
    tables=TABLES,
    collected=True,
)
