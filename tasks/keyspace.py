"""Key space by prefix, on any environment (read-only included): SCAN with MEMORY USAGE,
OBJECT ENCODING and element counts per key, under a budget (keys, server busy share, wall
time). Returns every sampled key and the scan's own cost; figures come from sql/043."""

from __future__ import annotations

import pyarrow as pa
import redis
from prefect import task
from prefect.cache_policies import NO_CACHE

from yardstick.config import Environment
from yardstick.connect import open_client
from yardstick.info import parse_fields, parse_info
from yardstick.keyscan import ScanBudget, ScanResult, scan_keyspace
from yardstick.prefixes import display, prefix_rule
from yardstick.profiles import KeyspaceProfile
from yardstick.schemas import TABLES, to_table
from yardstick.tasks.base import Measured, utc_now

ROLE = "keyspace"


def server_facts(client: redis.Redis, db: int) -> dict:
    """DBSIZE, used_memory, keys in the other databases and server CPU seconds, now."""
    info = parse_info(client.info())  # the default sections: memory, cpu, keyspace
    other = 0
    for name, value in info.get("keyspace", {}).items():
        if name.startswith("db") and name != f"db{db}":
            other += int(parse_fields(value).get("keys", 0))
    cpu = info.get("cpu", {})
    return {
        "dbsize": client.dbsize(),
        "used_memory_bytes": int(info.get("memory", {}).get("used_memory", 0)),
        "keys_other_dbs": other,
        "cpu_s": float(cpu.get("used_cpu_sys", 0)) + float(cpu.get("used_cpu_user", 0)),
    }


def _texts(values: list[bytes]) -> pa.Array:
    """Key names as strings; bytes that are not UTF-8 become backslash escapes."""
    raw = pa.array(values, type=pa.binary())
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([v.decode("utf-8", "backslashreplace") for v in values], pa.string())


def keys_table(result: ScanResult) -> pa.Table:
    """One row per sampled key (built column by column: a scan may hold a million keys)."""
    shown = {p: display(p) for p in set(result.prefixes)}
    columns = {
        "key": _texts(result.keys),
        "prefix": pa.array([shown[p] for p in result.prefixes], pa.string()),
        "type": pa.array(result.types, pa.string()),
        "encoding": pa.array(result.encodings, pa.string()),
        "elements": pa.array(result.elements, pa.int64()),
        "memory_usage_bytes": pa.array(result.memory_usage_bytes, pa.int64()),
    }
    return pa.table(columns, schema=TABLES["keyspace_keys"])


@task(name="keyspace", cache_policy=NO_CACHE)
def keyspace(env: Environment, profile: KeyspaceProfile) -> Measured:
    """Scan the key space under the profile's budget; every key sampled, and the scan's cost."""
    client = open_client(env, ROLE)
    try:
        started_at = utc_now()
        before = server_facts(client, env.db)
        result = scan_keyspace(
            client,
            ScanBudget(profile.max_keys, profile.busy_share, profile.max_wall_s),
            scan_count=profile.scan_count,
            memory_samples=profile.memory_samples,
            prefix_of=prefix_rule(profile.separators, profile.depth),
        )
        after = server_facts(client, env.db)
    finally:
        client.close()
    scan_row = {
        "started_at": started_at, "wall_s": result.wall_s, "paused_s": result.paused_s,
        "stop_reason": result.stop_reason, "max_keys": profile.max_keys,
        "busy_share_cap": profile.busy_share, "max_wall_s": profile.max_wall_s,
        "scan_count": profile.scan_count, "memory_samples": profile.memory_samples,
        "separators": profile.separators, "depth": profile.depth,
        "top_keys": profile.top_keys, "projection_factor": profile.projection_factor,
        "db": env.db, "dbsize_before": before["dbsize"], "dbsize_after": after["dbsize"],
        "keys_other_dbs": before["keys_other_dbs"],
        "used_memory_before_bytes": before["used_memory_bytes"],
        "used_memory_after_bytes": after["used_memory_bytes"],
        "server_cpu_before_s": before["cpu_s"], "server_cpu_after_s": after["cpu_s"],
        "rounds": result.rounds, "scan_calls": result.scan_calls,
        "duplicates": result.duplicates, "vanished": result.vanished,
        "guesses_wrong": result.guesses_wrong, "errors": sum(result.errors.values()),
        "first_error": result.first_error,
    }
    stats = [
        {"phase": phase, "command": s.command, "calls": s.calls, "usec": s.usec,
         "failed_calls": s.failed_calls}
        for phase, snapshot in (("before", result.own_before), ("after", result.own_after))
        for s in snapshot
    ]
    return Measured(
        tables={
            "keyspace_scans": to_table("keyspace_scans", [scan_row]),
            "keyspace_keys": keys_table(result),
            "keyspace_commandstats": to_table("keyspace_commandstats", stats),
        },
        window_s=result.wall_s,
    )
