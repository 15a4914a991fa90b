"""Key space by prefix, on any environment (read-only included): SCAN with each key's type
(from typed SCAN pages where the server has them), MEMORY USAGE and element count, and the
OBJECT ENCODING of a sample and of the top keys, under a budget (keys, a share of the server's
CPU, wall time), leaving the keys' LRU/LFU clocks and the server's error counters as they were.
Returns every sampled key and the scan's own cost; figures come from the keyspace models."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import redis
from pydantic import BaseModel, ConfigDict, Field

from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.info import parse_fields, parse_info
from yardstick.access.keyscan import ScanBudget, ScanResult, scan_keyspace
from yardstick.access.modules import KNOWN_TYPES, is_module_type, module_list, own_memory_bytes
from yardstick.access.prefixes import display
from yardstick.tasks.base import UTC_TS, Family, Measured, utc_now


class KeyspaceProfile(BaseModel):
    """Key space by prefix on any environment: SCAN with MEMORY USAGE, under a budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Budget: keys sampled, share of the server's CPU the scan may take (INFO used_cpu_sys +
    # used_cpu_user difference over wall time, less the rate read just before the scan), and
    # wall time.
    max_keys: int = Field(default=100_000, gt=0)
    busy_share: float = Field(default=0.05, gt=0, le=1)
    max_wall_s: float = Field(default=300.0, gt=0)
    scan_count: int = Field(default=1000, gt=0)
    # How long the server's CPU rate is read before the scan: other clients' share.
    baseline_s: float = Field(default=0.5, ge=0)
    # Prefix grouping: a key's prefix is its first `depth` segments ending in a separator.
    separators: str = Field(default=":", min_length=1)
    depth: int = Field(default=1, ge=1)
    # MEMORY USAGE SAMPLES; None keeps the server default (5), as redis-cli --memkeys does.
    memory_samples: int | None = Field(default=None, ge=0)
    top_keys: int = Field(default=10, ge=1)
    # "What would k times the keys of this prefix cost": k.
    projection_factor: float = Field(default=2.0, gt=0)
    # Element counts on a read-only server without CLIENT NO-TOUCH (before Redis 7.2): the
    # length commands would reset every key's LRU idle clock (or bump its LFU counter), which
    # changes what the server evicts next. Off: they are skipped there (elements NULL, the
    # report says why). On: they are sent, and the report counts the keys touched. Scratch
    # environments (the tool may write there) always get them.
    allow_touch: bool = False
    # Module keys sized by their module's own memory command (GRAPH.MEMORY USAGE) after the
    # scan, at most this many, within what is left of max_wall_s.
    max_module_keys: int = Field(default=100, ge=0)


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # One row per key-space scan: its budget, how it ended, the server around it.
    "keyspace_scans": pa.schema(
        [
            ("started_at", UTC_TS),
            ("wall_s", pa.float64()),
            ("paused_s", pa.float64()),  # slept to stay within the busy share
            ("stop_reason", pa.string()),  # complete | key_cap | time_cap
            ("max_keys", pa.int64()),
            ("busy_share_cap", pa.float64()),  # the budget: a share of the server's CPU
            ("max_wall_s", pa.float64()),
            ("scan_count", pa.int64()),
            ("memory_samples", pa.int64()),  # null: the server's default (5)
            ("separators", pa.string()),
            ("depth", pa.int32()),
            ("top_keys", pa.int32()),
            ("projection_factor", pa.float64()),
            ("db", pa.int32()),
            ("dbsize_before", pa.int64()),
            ("dbsize_after", pa.int64()),
            ("keys_other_dbs", pa.int64()),  # used_memory covers every database
            ("used_memory_before_bytes", pa.int64()),
            ("used_memory_after_bytes", pa.int64()),
            ("server_cpu_before_s", pa.float64()),  # INFO cpu, all clients
            ("server_cpu_after_s", pa.float64()),
            ("rounds", pa.int64()),
            ("scan_calls", pa.int64()),
            ("duplicates", pa.int64()),
            ("vanished", pa.int64()),
            # Length commands answered WRONGTYPE: before the type-first scan, wrong guesses;
            # since, a key that changed type between TYPE and its length command.
            ("guesses_wrong", pa.int64()),
            ("errors", pa.int64()),
            ("first_error", pa.string()),
            # Added with the footprint-free scan; null in older files.
            ("allow_touch", pa.bool_()),  # length commands allowed without NO-TOUCH
            ("server_version", pa.string()),  # redis_version, as INFO says
            # no-touch (CLIENT NO-TOUCH ON) | skipped (no length command: elements
            # null) | touched (length commands reset keys_touched clocks)
            ("touch_mode", pa.string()),
            ("touch_note", pa.string()),  # why CLIENT NO-TOUCH was not used
            ("keys_touched", pa.int64()),  # keys whose LRU/LFU clock the scan moved
            ("keyspace_lookups", pa.int64()),  # commands counted in keyspace_hits/misses
            ("commands", pa.int64()),  # commands the scan's rounds sent
            # INFO used_cpu_sys + used_cpu_user (all clients) as the scan started/ended,
            # and the rate before it (taken as other clients', subtracted).
            ("scan_cpu_start_s", pa.float64()),
            ("scan_cpu_end_s", pa.float64()),
            ("baseline_cpu_share", pa.float64()),
            ("baseline_window_s", pa.float64()),
            ("process_cpu_s", pa.float64()),  # /proc, prober on the server's host only
            # Highest CPU share the scan took over one pacing window (>= 0.1 s), that
            # window's length, and the longest run of windows over the budget.
            ("cpu_peak_share", pa.float64()),
            ("cpu_peak_window_s", pa.float64()),
            ("over_budget_longest_s", pa.float64()),
            # Added with typed SCAN pages; null in older files (every key's OBJECT ENCODING
            # was read then). scan | scan+type | encoding: where each key's type came from.
            ("type_source", pa.string()),
            ("typed_scan_calls", pa.int64()),  # SCAN ... TYPE t commands sent
            ("type_fallback_pages", pa.int64()),  # typed SCANs disagreed: TYPE asked
            # After the first 4096 keys, one key's OBJECT ENCODING in this many (1: every
            # key's), plus the top keys'; and how many keys' encodings were read.
            ("encoding_every", pa.int64()),
            ("encodings_read", pa.int64()),
        ]
    ),
    # Every key the scan sampled (what --bigkeys and --memkeys print, per key).
    "keyspace_keys": pa.schema(
        [
            ("key", pa.string()),  # non-UTF-8 bytes as backslash escapes
            ("prefix", pa.string()),  # `user:*`, or `(no prefix)`
            ("type", pa.string()),
            ("encoding", pa.string()),
            ("elements", pa.int64()),  # items; bytes for strings (STRLEN)
            ("memory_usage_bytes", pa.int64()),
        ]
    ),
    # One row per module key type the scan met: its module, whether MEMORY USAGE counts its
    # keys (measured: yardstick/access/modules.py; null when not known), and what the
    # module's own memory command says of the keys it was asked about.
    "keyspace_module_types": pa.schema(
        [
            ("type", pa.string()),  # TYPE's answer: graphdata, vectorset ...
            ("module", pa.string()),  # MODULE LIST name (null: not known for this type)
            ("module_version", pa.string()),
            ("keys", pa.int64()),  # keys of the type read by the scan
            ("memory_usage_bytes", pa.int64()),  # their MEMORY USAGE, summed
            ("memory_usage_counts", pa.bool_()),  # false: MEMORY USAGE leaves the value out
            ("own_command", pa.string()),  # GRAPH.MEMORY USAGE (null: the module has none)
            ("own_unit_bytes", pa.int64()),  # its answer's unit (1 MiB: whole MB, floored)
            ("keys_sized", pa.int64()),  # keys the own command was asked about
            ("own_memory_bytes", pa.int64()),  # its figures for those keys, summed
            ("modules_loaded", pa.string()),  # MODULE LIST: 'graph 41603, vectorset 1'
        ]
    ),
    # INFO commandstats of the scan's own commands, before and after it.
    "keyspace_commandstats": pa.schema(
        [
            ("phase", pa.string()),  # before | after
            ("command", pa.string()),
            ("calls", pa.int64()),
            ("usec", pa.int64()),
            ("failed_calls", pa.int64()),
        ]
    ),
}


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
    ending in one of `separators`, as access/prefixes.PrefixRule reads them, vectorized."""
    klass = "".join(f"\\x{b:02x}" for b in separators.encode())
    pattern = f"^(?P<prefix>(?:[^{klass}]*[{klass}]){{1,{depth}}})"
    found = pc.struct_field(pc.extract_regex(keys, pattern), [0])  # null: no separator
    distinct = pc.dictionary_encode(pc.fill_null(found, b""))
    shown = pa.array([display(p) for p in distinct.dictionary.to_pylist()], pa.string())
    return pc.take(shown, distinct.indices)


def keys_table(result: ScanResult, separators: str = ":", depth: int = 1) -> pa.Table:
    """One row per sampled key, built column by column (a scan may hold a million keys)."""
    keys = pa.array(result.keys, pa.binary())
    shown = prefixes(keys, separators, depth)
    if any(is_module_type(t) for t in set(result.types)):
        # A module's keys get rows of their own: `g:* [graphdata]` beside `g:*`.
        shown = pa.array(
            [
                f"{p} [{t}]" if is_module_type(t) else p
                for p, t in zip(shown.to_pylist(), result.types, strict=True)
            ],
            pa.string(),
        )
    columns = {
        "key": _texts(keys),
        "prefix": shown,
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


def module_rows(client: redis.Redis, result: ScanResult, max_keys: int, left_s: float) -> list:
    """One row per module key type the scan read; the module's own memory command asked of
    its biggest keys by MEMORY USAGE first, up to `max_keys` and within `left_s` seconds."""
    import time

    seen: dict[str, list[int]] = {}
    for index, kind in enumerate(result.types):
        if is_module_type(kind):
            seen.setdefault(kind, []).append(index)
    if not seen:
        return []
    loaded = module_list(client)
    versions = dict(loaded)
    deadline = time.monotonic() + max(0.0, left_s)
    budget = max_keys
    rows = []
    for kind, indexes in sorted(seen.items()):
        known = KNOWN_TYPES.get(kind)
        usage = [result.memory_usage_bytes[i] for i in indexes]
        sized, own_total = 0, 0
        if known is not None and known.own_command:
            order = sorted(indexes, key=lambda i: -(result.memory_usage_bytes[i] or 0))
            for i in order:
                if budget <= 0 or time.monotonic() > deadline:
                    break
                budget -= 1
                own = own_memory_bytes(client, result.keys[i], known)
                if own is not None:
                    sized, own_total = sized + 1, own_total + own
        rows.append(
            {
                "type": kind,
                "module": known.module if known else None,
                "module_version": versions.get(known.module) if known else None,
                "keys": len(indexes),
                "memory_usage_bytes": sum(u for u in usage if u is not None),
                "memory_usage_counts": known.memory_usage_counts if known else None,
                "own_command": " ".join(known.own_command) if known and known.own_command else None,
                "own_unit_bytes": known.own_unit_bytes if known and known.own_command else None,
                "keys_sized": sized,
                "own_memory_bytes": own_total if sized else None,
                "modules_loaded": ", ".join(f"{n} {v}" for n, v in loaded) or None,
            }
        )
    return rows


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
        module_types = module_rows(
            client, result, profile.max_module_keys, profile.max_wall_s - result.wall_s
        )
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
            "keyspace_scans": FAMILY.table("keyspace_scans", [row]),
            "keyspace_keys": keys_table(result, profile.separators, profile.depth),
            "keyspace_commandstats": FAMILY.table("keyspace_commandstats", stats),
            "keyspace_module_types": FAMILY.table("keyspace_module_types", module_types),
        },
        window_s=result.wall_s,
    )


FAMILY = Family(
    name="keyspace",
    # Read commands only, every environment, under a server-time budget.
    phase="memory",
    scope="primary",
    measure=keyspace,
    arguments=lambda env, profile, ctx: (env, profile.keyspace),
    tables=TABLES,
    settings=KeyspaceProfile,
    presets={
        "quick": KeyspaceProfile(max_keys=10_000, busy_share=0.10, max_wall_s=5.0),
        "nightly": KeyspaceProfile(max_keys=200_000, busy_share=0.05, max_wall_s=300.0),
    },
    detail_tables=("keyspace_keys",),
)
