"""Key space by prefix, on any environment (read-only included): SCAN with each key's type
(from typed SCAN pages where the server has them), MEMORY USAGE and element count, and the
OBJECT ENCODING of a sample and of the top keys, under a budget (keys, a share of the server's
CPU, wall time), leaving the keys' LRU/LFU clocks and the server's error counters as they were.
Returns every sampled key and the scan's own cost; figures come from the keyspace models."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import redis
from prefect import task
from prefect.cache_policies import NO_CACHE

from yardstick.config import Environment
from yardstick.connect import open_client
from yardstick.info import parse_fields, parse_info
from yardstick.keyscan import ScanBudget, ScanResult, scan_keyspace
from yardstick.prefixes import display
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


def _texts(values: pa.Array) -> pa.Array:
    """Key names as strings; bytes that are not UTF-8 become backslash escapes."""
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        decoded = [v.decode("utf-8", "backslashreplace") for v in values.to_pylist()]
        return pa.array(decoded, pa.string())


def prefixes(keys: pa.Array, separators: str, depth: int) -> pa.Array:
    """Each key's prefix as shown (`user:*`, or "(no prefix)"): its first `depth` segments
    ending in one of `separators`, as yardstick.prefixes.PrefixRule reads them, vectorized."""
    klass = "".join(f"\\x{b:02x}" for b in separators.encode())
    pattern = f"^(?P<prefix>(?:[^{klass}]*[{klass}]){{1,{depth}}})"
    found = pc.struct_field(pc.extract_regex(keys, pattern), [0])  # null: no separator
    distinct = pc.dictionary_encode(pc.fill_null(found, b""))
    shown = pa.array([display(p) for p in distinct.dictionary.to_pylist()], pa.string())
    return pc.take(shown, distinct.indices)


def keys_table(result: ScanResult, separators: str = ":", depth: int = 1) -> pa.Table:
    """One row per sampled key, built column by column (a scan may hold a million keys)."""
    keys = pa.array(result.keys, pa.binary())
    columns = {
        "key": _texts(keys),
        "prefix": prefixes(keys, separators, depth),
        "type": pa.array(result.types, pa.string()),
        "encoding": pa.array(result.encodings, pa.string()),
        "elements": pa.array(result.elements, pa.int64()),
        "memory_usage_bytes": pa.array(result.memory_usage_bytes, pa.int64()),
    }
    return pa.table(columns, schema=TABLES["keyspace_keys"])


def scan_row(result: ScanResult) -> dict:
    """What the scan cost the server and did to its keys, as keyspace_scans columns."""
    return {
        "wall_s": result.wall_s,
        "paused_s": result.paused_s,
        "stop_reason": result.stop_reason,
        "rounds": result.rounds,
        "scan_calls": result.scan_calls,
        "commands": result.commands,
        "duplicates": result.duplicates,
        "vanished": result.vanished,
        "guesses_wrong": result.wrongtype,
        "errors": sum(result.errors.values()),
        "first_error": result.first_error,
        "server_version": result.server_version,
        "touch_mode": result.touch_mode,
        "touch_note": result.touch_note,
        "keys_touched": result.keys_touched,
        "keyspace_lookups": result.keyspace_lookups,
        "scan_cpu_start_s": result.cpu_start_s,
        "scan_cpu_end_s": result.cpu_end_s,
        "baseline_cpu_share": result.baseline_cpu_share,
        "baseline_window_s": result.baseline_window_s,
        "process_cpu_s": result.process_cpu_s,
        "cpu_peak_share": result.cpu_peak_share,
        "cpu_peak_window_s": result.cpu_peak_window_s,
        "over_budget_longest_s": result.over_budget_longest_s,
        "type_source": result.type_source,
        "typed_scan_calls": result.typed_scan_calls,
        "type_fallback_pages": result.type_fallback_pages,
        "encoding_every": result.encoding_every,
        "encodings_read": result.encodings_read,
    }


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
            # A scratch server holds only what the tool may write: touching is harmless there.
            allow_touch=profile.allow_touch or env.mode == "scratch",
            baseline_s=profile.baseline_s,
            on_server_host=env.on_server_host,
            top_keys=profile.top_keys,  # their encodings are read whatever the sample
        )
        after = server_facts(client, env.db)
    finally:
        client.close()
    row = {
        "started_at": started_at,
        "max_keys": profile.max_keys,
        "busy_share_cap": profile.busy_share,
        "max_wall_s": profile.max_wall_s,
        "scan_count": profile.scan_count,
        "memory_samples": profile.memory_samples,
        "separators": profile.separators,
        "depth": profile.depth,
        "top_keys": profile.top_keys,
        "projection_factor": profile.projection_factor,
        "allow_touch": profile.allow_touch or env.mode == "scratch",
        "db": env.db,
        "dbsize_before": before["dbsize"],
        "dbsize_after": after["dbsize"],
        "keys_other_dbs": before["keys_other_dbs"],
        "used_memory_before_bytes": before["used_memory_bytes"],
        "used_memory_after_bytes": after["used_memory_bytes"],
        "server_cpu_before_s": before["cpu_s"],
        "server_cpu_after_s": after["cpu_s"],
        **scan_row(result),
    }
    stats = [
        {
            "phase": phase,
            "command": s.command,
            "calls": s.calls,
            "usec": s.usec,
            "failed_calls": s.failed_calls,
        }
        for phase, snapshot in (("before", result.own_before), ("after", result.own_after))
        for s in snapshot
    ]
    return Measured(
        tables={
            "keyspace_scans": to_table("keyspace_scans", [row]),
            "keyspace_keys": keys_table(result, profile.separators, profile.depth),
            "keyspace_commandstats": to_table("keyspace_commandstats", stats),
        },
        window_s=result.wall_s,
    )
