"""The synthetic schedule of bench/retention.py (and bench/lake_files.py, bench/landing.py): 50
environments, a nightly run and a collection every few minutes each, as Arrow tables in the
lake's file schema (run_id first). Imported as `lakes.schedule`: tests/ is on the import path
of the tests (pytest's rootdir) and of the benches (bench/_harness.py).

Everything is a pure function of (environment index, UTC day, collections per day, keys), so a
month generated for a 365-day lake and for a 730-day lake is the same file.

What a night and a collection land follows a real run (bench/real_shape.json, written by
bench/real_shape.py): every table the real scratch nightly, read-only nightly and collection
landed, with their row counts. The tables whose values make the figures and trends (runs,
fingerprint, round trip, counters, SLOWLOG, latency monitor, benchmark, intrinsic, key space)
are modelled here, night after night (steps in the round trip, upgrades, restarts); every other
table is the real run's rows replayed (timestamps moved to the night, floats jittered). Columns
come from the declared schemas (`file_schema`), never from this file: a column the model does
not know takes the real run's value, else null, so a new column never breaks the generator.

Collections land only what is new: SLOWLOG entries logged since the previous collection (0-5,
not the whole queue; `slowlog_collections` says which ids the queue held and the cursor above
which it landed), and latency-monitor samples newer than the last landed. The latency monitor
is on in two environments of three (latency_latest and latency_history land there)."""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from yardstick import CLIENT_NAME_PREFIX, __version__
from yardstick.storage.schemas import DETAIL_TABLES, SCHEMA_VERSION, TABLES, file_schema

SHAPE_PATH = Path(__file__).resolve().parents[2] / "bench" / "real_shape.json"
# Bump when generated content changes: cached units of an older generator are not reused.
GENERATOR = "5"
# The last day of every lake is the night before TONIGHT; tonight is landed by the bench.
TONIGHT = date(2025, 12, 20)
# Night 0 of the environments' character (steps, upgrades): two years before tonight.
BASE_DAY = TONIGHT - timedelta(days=730)
# Slots of the SLOWLOG stream are counted from here (a server running since before it).
ORIGIN_DAY = TONIGHT - timedelta(days=1500)
NIGHTLY_AT = time(2, 0)
VERSIONS = ["7.0.15", "7.2.4", "7.2.5", "7.4.1", "7.4.2", "8.0.2", "8.2.1"]
CPUS = ["AMD EPYC 7763 64-Core Processor", "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"]
# INFO commandstats names as a busy server lists them (subcommands as Redis 7 writes them).
COMMANDS = (
    "ping get set del exists expire ttl incr hget hset hgetall lpush lrange sadd smembers"
    " zadd zrange info config|get client|setname"
).split()
WINDOWS = 5
PING_WINDOW_S = 5.0
BUCKET_GROWTH = 1.02  # the probe's histogram: 2 % buckets (yardstick/tasks/round_trip.py)
SLOWLOG_MAX_LEN = 128
SLOWLOG_NEW_MAX = 5  # 0..5 new application entries between two collections
# Application commands that reach the SLOWLOG: (command, redacted args, client name).
SLOW_COMMANDS = [
    ("keys", ["keys", "<1 bytes>"], "app"),
    ("hgetall", ["hgetall", "<14 bytes>"], "app"),
    ("smembers", ["smembers", "<11 bytes>"], "app"),
    ("zrangebyscore", ["zrangebyscore", "<9 bytes>", "<1 bytes>", "<4 bytes>"], "ranker"),
    ("lrange", ["lrange", "<10 bytes>", "<1 bytes>", "<2 bytes>"], "worker"),
    ("del", ["del", "<12 bytes>"], "worker"),
    ("sort", ["sort", "<8 bytes>", "<5 bytes>"], ""),
    ("eval", ["eval", "<212 bytes>", "<1 bytes>", "<9 bytes>"], "app"),
]
DOCTOR_OFF = (
    "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. "
    'You may use "CONFIG SET latency-monitor-threshold <milliseconds>." in order to enable it. '
    "If we weren't in a deep space mission I'd suggest to take a look at "
    "https://redis.io/topics/latency-monitor."
)
# Key-space prefixes: (prefix, share, type, encoding, typical elements, bytes per element).
PREFIXES = [
    ("user:", 0.30, "hash", "listpack", 8, 22.0),
    ("session:", 0.20, "string", "embstr", 40, 2.2),
    ("cart:", 0.08, "hash", "listpack", 5, 30.0),
    ("product:", 0.06, "hash", "hashtable", 200, 45.0),
    ("feed:", 0.05, "list", "quicklist", 50, 50.0),
    ("rank:", 0.01, "zset", "skiplist", 500, 80.0),
    ("rate:", 0.12, "string", "int", 1, 56.0),
    ("lock:", 0.03, "string", "embstr", 36, 2.2),
    ("tags:", 0.06, "set", "listpack", 12, 16.0),
    ("queue:", 0.02, "list", "listpack", 20, 30.0),
    ("cache:", 0.06, "string", "raw", 2000, 1.2),
    ("", 0.01, "string", "embstr", 10, 5.0),
]
KEYSPACE_COMMANDS = ["scan", "memory|usage", "type", "object|encoding"] + [
    "strlen",
    "hlen",
    "llen",
    "scard",
    "zcard",
]
_TS = pa.timestamp("us", tz="UTC")
# Days after TONIGHT the streams cover: tonight and the warm nights after it are landed by the
# bench, all in TONIGHT's month (a new month adds every table's first file of that month).
AFTER_DAYS = 10
# Tables whose rows follow the streams here (SLOWLOG, latency monitor) or the bench's --keys,
# not the real run's count.
STREAM_TABLES = frozenset({"slowlog_entries", "latency_history", "latency_latest"})
SCALED_TABLES = frozenset({"keyspace_keys"})
# Latency samples new between two collections of a server with the monitor on: 0, 1 or 2.
LATENCY_NEW_P = (0.85, 0.12, 0.03)


# -- the real run's shape ---------------------------------------------------------------------


@lru_cache(maxsize=1)
def real_shape() -> dict:
    """bench/real_shape.json: per run kind, the families, rows per table and example rows."""
    if not SHAPE_PATH.exists():
        raise SystemExit(f"{SHAPE_PATH} is missing: run .venv/bin/python bench/real_shape.py")
    return json.loads(SHAPE_PATH.read_text())


def kind_shape(kind: str) -> dict:
    """The shape of one run kind (scratch_nightly, read_only_nightly, *_collection)."""
    kinds = real_shape()["kinds"]
    if kind not in kinds:
        raise SystemExit(
            f"bench/real_shape.json has no {kind!r} runs (it has {sorted(kinds)}): run "
            ".venv/bin/python bench/real_shape.py"
        )
    return kinds[kind]


def generator_key() -> str:
    """GENERATOR, the real shape and every file schema: cached units of another key are not
    reused (a new column or table regenerates the store)."""
    digest = hashlib.sha256(SHAPE_PATH.read_bytes() if SHAPE_PATH.exists() else b"")
    for table in sorted(TABLES):
        digest.update(f"{table}:{file_schema(table)}".encode())
    return f"{GENERATOR}-{digest.hexdigest()[:10]}"


def latency_events() -> list[str]:
    """The latency-monitor events the real run saw (LATENCY LATEST), else 'command'."""
    names = set()
    for data in real_shape()["kinds"].values():
        names |= {row.get("event") for row in data["examples"].get("latency_latest", [])}
    return sorted(n for n in names if n) or ["command"]


def _example(kind: str, table: str, column: str) -> object:
    """The first value the real run landed in `column` of `table` (None if none)."""
    for row in kind_shape(kind)["examples"].get(table, []):
        if row.get(column) is not None:
            return row[column]
    return None


def _array(values: list, type_: pa.DataType) -> pa.Array:
    """`values` as `type_`; nulls when the real run's values no longer fit the type."""
    try:
        return pa.array(values, type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.nulls(len(values), type_)


def _fill(kind: str, table: str, field: pa.Field, at_s: np.ndarray) -> pa.Array:
    """A column the model does not make: the real run's value (timestamps moved to each run's
    start), else null (a new column the real shape has not seen yet)."""
    n = len(at_s)
    value = _example(kind, table, field.name)
    if value is None:
        return pa.nulls(n, field.type)
    if pa.types.is_timestamp(field.type):
        return _ts(at_s + float(value))
    return _array([value] * n, field.type)


def conform(table: str, columns: dict[str, pa.Array], at_s: np.ndarray, kind: str) -> dict:
    """The columns of `table`'s declared schema, in its order: the model's where it has them
    (cast; a column the schema dropped is left out), else `_fill`; at_s: each row's run start."""
    out = {}
    for field in TABLES[table]:
        data = columns.get(field.name)
        if data is not None:
            try:
                out[field.name] = data.cast(field.type)
                continue
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass  # the type changed: fall back to the real run's value
        out[field.name] = _fill(kind, table, field, at_s)
    return out


@lru_cache(maxsize=512)
def _replay_base(kind: str, table: str) -> tuple[dict[str, pa.Array], dict[str, np.ndarray], int]:
    """The real run's rows of `table` as columns of its schema, cycled to the real row count:
    (columns, timestamp offsets in s after the run's start, rows)."""
    shape = kind_shape(kind)
    rows = int(shape["rows"].get(table, 0))
    examples = shape["examples"].get(table) or [{}]
    cycled = [examples[i % len(examples)] for i in range(rows)]
    columns, offsets = {}, {}
    for field in TABLES[table]:
        values = [row.get(field.name) for row in cycled]
        if pa.types.is_timestamp(field.type):
            offsets[field.name] = np.array(
                [float(v) if v is not None else 0.0 for v in values], np.float64
            )
        else:
            columns[field.name] = _array(values, field.type)
    return columns, offsets, rows


def replay(
    kind: str, table: str, at_s: np.ndarray, jitter: np.ndarray | None = None
) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The real run's rows of `table` once per run starting at `at_s` (floats times `jitter`,
    one factor per run): (columns, the index of each row's run)."""
    base, offsets, m = _replay_base(kind, table)
    n = len(at_s)
    owner = np.repeat(np.arange(n), m)
    take = pa.array(np.tile(np.arange(m), n))
    out = {name: column.take(take) for name, column in base.items()}
    for name, offset in offsets.items():
        out[name] = _ts(np.repeat(at_s, m) + np.tile(offset, n))
    if jitter is not None:
        factor = pa.array(np.repeat(jitter, m))
        for name, column in out.items():
            if pa.types.is_floating(column.type) and not name.endswith("_s"):
                out[name] = pc.multiply(column, factor.cast(column.type))
    return out, owner


def table_owners() -> dict[str, str]:
    """Every table the tool may land, with who declares it: a family's name, or `run` for the
    tables yardstick/storage/schemas.py declares itself (runs, steps, family_load, ...)."""
    from yardstick.tasks.registry import families

    owners = {table: "run" for table in TABLES}
    for family in families().values():
        owners |= {table: family.name for table in family.tables}
    return owners


# Tables a run lands only when asked or met (the environments file's `rebaseline:` entries;
# module key types, on a server with a module's keys): the real shape's runs have none.
LANDED_ON_REQUEST = {"rebaselines", "keyspace_module_types"}


def declared_tables(kind: str) -> set[str]:
    """Every table the tool may land in a run of `kind`, from its own declarations: the tables
    of the families that may run there, and every table no family owns (whatever the run)."""
    from yardstick.tasks.registry import families

    collection = kind.endswith("_collection")
    scratch = kind.startswith("scratch")
    tables = {table for table, owner in table_owners().items() if owner == "run"}
    for family in families().values():
        if (collection and not family.collected) or (not scratch and family.scratch_only):
            continue
        tables |= set(family.tables)
    return tables - LANDED_ON_REQUEST


def unknown_tables() -> dict[str, list[str]]:
    """Per table the tool declares that the real shape has never seen, the run kinds whose
    record lacks it (rerun bench/real_shape.py); empty when the shape is current."""
    out: dict[str, list[str]] = {}
    for kind in KINDS:
        for table in sorted(declared_tables(kind) - set(kind_shape(kind)["rows"])):
            out.setdefault(table, []).append(kind)
    return out


RETAKE = (
    "re-take the shape from real runs with `nice -n 10 .venv/bin/python bench/real_shape.py` "
    "(it starts two redis-servers and runs a real nightly and 4 collections, a few minutes), "
    "then commit bench/real_shape.json"
)


def unknown_table_problems() -> list[str]:
    """One line per table missing from bench/real_shape.json: which table, who declares it,
    which run kinds lack it, and how to re-take the shape."""
    owners = table_owners()
    problems = []
    for table, kinds in unknown_tables().items():
        owner = owners.get(table, "run")
        who = (
            "yardstick/storage/schemas.py (no family)"
            if owner == "run"
            else f"the {owner!r} family"
        )
        problems.append(
            f"table {table!r}, declared by {who}, is missing from bench/real_shape.json "
            f"({', '.join(kinds)}): {RETAKE}"
        )
    return problems


KINDS = ("scratch_nightly", "read_only_nightly", "scratch_collection", "read_only_collection")


def env_name(index: int) -> str:
    """Environment names as a config would hold them."""
    return f"env-{index:02d}"


def day_start(day: date) -> datetime:
    """Midnight UTC of `day`."""
    return datetime.combine(day, time(0), tzinfo=UTC)


def nightly_run_id(day: date) -> str:
    """The nightly flow measures every environment under one run id, at 02:00."""
    return f"{day:%Y%m%d}T{NIGHTLY_AT:%H%M%S}Z-n{day.toordinal() % 46656:x}"


def collection_run_id(day: date, slot: int, per_day: int) -> str:
    """One collect flow run reads every environment under one run id, every 86400/per_day s."""
    at = day_start(day) + timedelta(seconds=slot * 86_400 // per_day)
    return f"{at:%Y%m%dT%H%M%S}Z-c{slot:03d}"


def night_of(day: date) -> int:
    """Night index of `day` in the environments' character (0 = two years before tonight)."""
    return (day - BASE_DAY).days


def epoch_s(at: datetime) -> float:
    """Seconds since the Unix epoch."""
    return at.timestamp()


class EnvProfile:
    """The fixed character of one synthetic environment: its machine, its steps, its upgrades."""

    def __init__(self, index: int, horizon_nights: int = 3650) -> None:
        rng = random.Random(f"env:{index}")
        self.name = env_name(index)
        self.index = index
        # Every fifth environment is read-only: no benchmark, intrinsic or experiments there.
        self.mode = "read-only" if index % 5 == 4 else "scratch"
        self.transport = "port-forwarded" if index % 10 == 3 else "direct"
        self.prober_on_host = self.transport == "direct"
        self.cores = rng.choice([4, 8, 16])
        self.cpu_model = rng.choice(CPUS)
        self.rtt_us = rng.uniform(40, 250)
        self.server_us = rng.uniform(0.8, 2.0)
        self.rps = rng.uniform(60_000, 150_000)
        self.noise = rng.choice([0.02, 0.03, 0.03, 0.05])
        # One or two steps of about 20 % in the round trip, one in throughput, within 2 years.
        self.rtt_steps = sorted(
            (rng.randrange(30, 700), rng.choice([0.8, 1.2, 1.25]))
            for _ in range(rng.choice([1, 2]))
        )
        self.rps_step = (rng.randrange(30, 700), rng.choice([0.8, 1.2]))
        # A Redis upgrade every 120 to 300 nights; it restarts the server (at 01:00 that day).
        self.upgrades, night = [], rng.randrange(20, 200)
        while night < horizon_nights:
            self.upgrades.append(night)
            night += rng.randrange(120, 300)
        self.first_version = rng.randrange(0, 3)
        # Server starts (epoch s): the first long before ORIGIN_DAY, then one per upgrade.
        first = epoch_s(day_start(ORIGIN_DAY)) - 3_600
        self.starts_s = np.array(
            [first]
            + [
                epoch_s(day_start(BASE_DAY + timedelta(days=u)) + timedelta(hours=1))
                for u in self.upgrades
            ]
        )
        self.url = f"redis://10.0.0.{index}:6379/0"
        self.host_group = f"host-{index:02d}"
        # The latency monitor is on (threshold 1 ms) in two environments of three.
        self.latency_monitor = index % 3 != 1

    def kind(self, collection: bool) -> str:
        """The real run kind this environment's runs follow (see real_shape.json)."""
        mode = "scratch" if self.mode == "scratch" else "read_only"
        return f"{mode}_{'collection' if collection else 'nightly'}"

    def version(self, restarts: int) -> str:
        """The Redis running after `restarts` upgrades."""
        return VERSIONS[min(self.first_version + restarts, len(VERSIONS) - 1)]

    def server_run_id(self, restarts: int) -> str:
        """INFO server run_id of the process started at the `restarts`-th upgrade."""
        return f"{self.index:04x}{restarts:04x}".ljust(40, "0")

    def factor(self, steps: list[tuple[int, float]], night: int) -> float:
        """Product of the step factors in effect on this night."""
        return math.prod(f for at, f in steps if at <= night)

    def restarts_at(self, at_s: float) -> int:
        """Upgrades (server restarts) before this instant."""
        return int(np.searchsorted(self.starts_s, at_s, side="right")) - 1


@lru_cache(maxsize=64)
def profile(index: int) -> EnvProfile:
    """The profile of environment `index` (cached per process)."""
    return EnvProfile(index)


def _mix(values: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of `values` ^ salt: a reproducible pseudo-random uint64 per value."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) ^ np.uint64(salt & 0xFFFFFFFFFFFFFFFF)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _unit(values: np.ndarray, salt: int) -> np.ndarray:
    """Uniform floats in [0, 1) from `values`."""
    return (_mix(values, salt) >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class SlowlogStream:
    """Application SLOWLOG entries of one environment, one collection slot after another.

    Entry j (counted over the whole horizon) is created in slot searchsorted(cum, j); a server
    restart empties the queue and restarts ids at 0."""

    def __init__(self, env: EnvProfile, per_day: int, max_len: int) -> None:
        self.env, self.per_day, self.max_len = env, per_day, max_len
        self.step_s = 86_400 / per_day
        self.origin_s = epoch_s(day_start(ORIGIN_DAY))
        slots = (TONIGHT - ORIGIN_DAY).days * per_day + per_day * AFTER_DAYS
        rng = np.random.default_rng([env.index, per_day, 17])
        self.cum = np.cumsum(rng.integers(0, SLOWLOG_NEW_MAX + 1, size=slots, dtype=np.int64))
        # First slot of each server process and the entries created before it.
        first_slot = np.ceil((env.starts_s - self.origin_s) / self.step_s).astype(np.int64)
        self.first_slot = np.clip(first_slot, 0, slots)
        self.base = np.where(self.first_slot > 0, self.cum[np.maximum(self.first_slot - 1, 0)], 0)
        self.salt = env.index * 1_000_003 + 7
        self.servers = pa.array([env.server_run_id(r) for r in range(len(env.starts_s))])

    def slot_of(self, day: date, slot: int) -> int:
        """Global slot index of a day's collection slot."""
        return (day - ORIGIN_DAY).days * self.per_day + slot

    def slot_time_s(self, g: np.ndarray) -> np.ndarray:
        """Epoch seconds at which slot `g` is collected."""
        return self.origin_s + g * self.step_s

    def server_of(self, g: np.ndarray) -> np.ndarray:
        """Restarts before slot `g` (which server process answered)."""
        return np.searchsorted(self.first_slot, g, side="right") - 1

    def queue(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each slot: queue length, and every entry SLOWLOG GET -1 returns (global index,
        newest first) with the slot position it belongs to."""
        restarts = self.server_of(g)
        hi = self.cum[g]
        lo = np.maximum(hi - self.max_len, self.base[restarts])
        counts = hi - lo
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(g)), counts)
        start = np.repeat(np.cumsum(counts) - counts, counts)
        j = np.repeat(hi - 1, counts) - (np.arange(total) - start)
        return counts, j, owner

    def landed(self, g: np.ndarray) -> dict[str, np.ndarray]:
        """What the collections of slots `g` read and land: only the entries new since the
        previous collection (the queue as read gives its oldest and newest id; the cursor is
        the newest id landed before, -1 = none: that collection lands the whole queue)."""
        restarts = self.server_of(g)
        hi = self.cum[g]
        base = self.base[restarts]
        queued_lo = np.maximum(hi - self.max_len, base)
        previous = np.maximum(g - 1, 0)
        same_server = (g > 0) & (self.server_of(previous) == restarts)
        seen_hi = np.where(same_server, self.cum[previous], base)
        new_lo = np.maximum(seen_hi, queued_lo)
        counts = hi - new_lo
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(g)), counts)
        start = np.repeat(np.cumsum(counts) - counts, counts)
        j = np.repeat(hi - 1, counts) - (np.arange(total) - start)
        return {
            "queued": hi - queued_lo,
            "oldest_id": np.where(hi > queued_lo, queued_lo - base, -1),
            "newest_id": np.where(hi > queued_lo, hi - 1 - base, -1),
            "cursor": np.where(same_server & (seen_hi > base), seen_hi - 1 - base, -1),
            "restarts": restarts,
            "j": j,
            "owner": owner,
        }

    def entries(self, j: np.ndarray, restarts: np.ndarray) -> dict[str, pa.Array]:
        """Columns of entries `j` (global indices) of the server after `restarts` upgrades."""
        h = _mix(j, self.salt)
        created = np.searchsorted(self.cum, j, side="right")
        logged_s = np.floor(self.slot_time_s(created) - _unit(j, self.salt + 1) * self.step_s)
        kind = (h % np.uint64(len(SLOW_COMMANDS))).astype(np.int64)
        templates = pa.array([c[1] for c in SLOW_COMMANDS], pa.list_(pa.string()))
        names = pa.array([c[0] for c in SLOW_COMMANDS], pa.string())
        clients = pa.array([c[2] for c in SLOW_COMMANDS], pa.string())
        counts = np.array([len(c[1]) for c in SLOW_COMMANDS], np.int32)
        port = 40_000 + (h >> np.uint64(20)) % np.uint64(20_000)
        addr = pc.binary_join_element_wise(
            pa.array(np.full(len(j), f"10.0.1.{self.env.index % 250 + 2}:", dtype=object)),
            pc.cast(pa.array(port.astype(np.int64)), pa.string()),
            "",
        )
        kind_arr = pa.array(kind)
        return {
            "server_run_id": self.servers.take(pa.array(restarts)),
            "entry_id": pa.array(j - self.base[restarts]),
            "logged_at": pa.array((logged_s * 1e6).astype(np.int64), pa.int64()).cast(_TS),
            "duration_us": pa.array(
                10_000 + ((h >> np.uint64(8)) % np.uint64(70_000)).astype(np.int64)
            ),
            "command": names.take(kind_arr),
            "args": templates.take(kind_arr),
            "args_redacted": pa.array(np.ones(len(j), bool)),
            "arg_count": pa.array(counts[kind]),
            "arg_count_original": pa.nulls(len(j), pa.int32()),
            "complexity": pa.nulls(len(j), pa.string()),
            "client_addr": addr,
            "client_name": clients.take(kind_arr),
            "entry_fields": pa.array(np.full(len(j), 6, np.int8)),
        }


@lru_cache(maxsize=8)
def stream(index: int, per_day: int, max_len: int) -> SlowlogStream:
    """The SLOWLOG stream of environment `index` (cached per process)."""
    return SlowlogStream(profile(index), per_day, max_len)


def _ts(seconds: np.ndarray) -> pa.Array:
    """Epoch seconds as UTC timestamps (µs)."""
    return pa.array(np.round(seconds * 1e6).astype(np.int64), pa.int64()).cast(_TS)


def _finish(
    table: str, columns: dict[str, pa.Array], run_ids: pa.Array, at_s: np.ndarray, kind: str
) -> pa.Table:
    """A table in the lake file schema (run_id and schema_version first), its columns the
    model's or `conform`'s; at_s: each row's run start."""
    schema = file_schema(table)
    n = len(run_ids)
    columns = {
        "run_id": run_ids,
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION, np.int16)),
        **conform(table, columns, at_s, kind),
    }
    return pa.table([columns[f.name] for f in schema], schema=schema)


def _const(value: object, n: int, type_: pa.DataType) -> pa.Array:
    """`n` copies of one value."""
    return pa.array([value] * n, type_) if n < 64 else pa.repeat(pa.scalar(value, type_), n)


class LatencyStream:
    """Latency-monitor samples of one environment (monitor on), collection slot after slot:
    0-2 new samples per slot, each of one of the real run's events."""

    def __init__(self, env: EnvProfile, per_day: int) -> None:
        self.slowlog = stream(env.index, per_day, SLOWLOG_MAX_LEN)
        rng = np.random.default_rng([env.index, per_day, 23])
        slots = len(self.slowlog.cum)
        new = rng.choice(len(LATENCY_NEW_P), size=slots, p=LATENCY_NEW_P).astype(np.int64)
        self.cum = np.cumsum(new)
        self.salt = env.index * 7_001 + 11
        self.events = pa.array(latency_events(), pa.string())

    def landed(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Samples newer than the last landed for each slot: (sample indices, owner slot)."""
        previous = np.where(g > 0, self.cum[np.maximum(g - 1, 0)], 0)
        counts = self.cum[g] - previous
        owner = np.repeat(np.arange(len(g)), counts)
        start = np.repeat(np.cumsum(counts) - counts, counts)
        k = np.repeat(previous, counts) + (np.arange(int(counts.sum())) - start)
        return k, owner

    def samples(self, k: np.ndarray) -> dict[str, np.ndarray | pa.Array]:
        """Columns of samples `k`: event, when (whole seconds, as LATENCY HISTORY), ms."""
        s = self.slowlog
        created = np.searchsorted(self.cum, k, side="right")
        at_s = np.floor(s.slot_time_s(created) - _unit(k, self.salt) * s.step_s)
        h = _mix(k, self.salt + 1)
        return {
            "event": self.events.take(pa.array((h % np.uint64(len(self.events))).astype(int))),
            "at_s": at_s,
            "ms": 1 + ((h >> np.uint64(9)) % np.uint64(40)).astype(np.int64),
        }


@lru_cache(maxsize=8)
def latency_stream(index: int, per_day: int) -> LatencyStream:
    """The latency-monitor stream of environment `index` (cached per process)."""
    return LatencyStream(profile(index), per_day)


def latency_tables(
    env: EnvProfile,
    kind: str,
    g: np.ndarray,
    at_s: np.ndarray,
    run_ids: pa.Array,
    server_ids: pa.Array,
    per_day: int,
    new_history: bool = True,
) -> dict[str, pa.Table]:
    """latency_collections, and with the monitor on latency_latest (one row per event seen)
    and latency_history (samples newer than the last landed; none when `new_history` is
    False: a nightly run between two collections)."""
    n = len(g)
    on = env.latency_monitor
    events = latency_events() if on else []
    out = {
        "latency_collections": _finish(
            "latency_collections",
            {
                "server_run_id": server_ids,
                "collected_at": _ts(at_s + 0.01),
                "threshold_ms": _const(1 if on else 0, n, pa.int64()),
                "events": _const(len(events), n, pa.int32()),
                "doctor_text": _const(
                    _example(kind, "latency_collections", "doctor_text") if on else DOCTOR_OFF,
                    n,
                    pa.string(),
                ),
                "error": pa.nulls(n, pa.string()),
            },
            run_ids,
            at_s,
            kind,
        )
    }
    if not on:
        return out
    lat = latency_stream(env.index, per_day)
    last = np.maximum(lat.cum[g] - 1, 0)
    latest = lat.samples(last)
    m = len(events)
    rows = np.repeat(np.arange(n), m)
    out["latency_latest"] = _finish(
        "latency_latest",
        {
            "server_run_id": server_ids.take(pa.array(rows)),
            "event": pa.array(events * n, pa.string()),
            "latest_at": _ts(np.repeat(latest["at_s"], m)),
            "latest_ms": pa.array(np.repeat(latest["ms"], m)),
            "max_ms": pa.array(np.repeat(np.maximum(latest["ms"], 25), m)),
        },
        run_ids.take(pa.array(rows)),
        at_s[rows],
        kind,
    )
    if new_history:
        k, owner = lat.landed(g)
        sample = lat.samples(k)
        out["latency_history"] = _finish(
            "latency_history",
            {
                "server_run_id": server_ids.take(pa.array(owner)),
                "event": sample["event"],
                "sampled_at": _ts(sample["at_s"]),
                "latency_ms": pa.array(sample["ms"]),
            },
            run_ids.take(pa.array(owner)),
            at_s[owner],
            kind,
        )
    return out


def slowlog_tables(
    s: SlowlogStream,
    kind: str,
    g: np.ndarray,
    at_s: np.ndarray,
    run_ids: pa.Array,
    server_ids: pa.Array,
    versions: pa.Array,
    uptime_s: np.ndarray,
    max_len: int,
    new_entries: bool = True,
) -> dict[str, pa.Table]:
    """slowlog_collections and slowlog_entries of the reads at slots `g`: only the entries new
    since the previous collection land (none when `new_entries` is False: a nightly run a few
    seconds after a collection)."""
    n = len(g)
    read = s.landed(g)
    read_s = 0.0015 + read["queued"] * 0.00002
    cursor = read["cursor"] if new_entries else read["newest_id"]

    def ids(values: np.ndarray) -> pa.Array:
        """Ids with -1 as null (an empty queue; no cursor)."""
        return pa.array(values, pa.int64(), mask=values < 0)

    out = {
        "slowlog_collections": _finish(
            "slowlog_collections",
            {
                "server_run_id": server_ids,
                "redis_version": versions,
                "uptime_s": pa.array(uptime_s),
                "collected_at": _ts(at_s + read_s),
                "slowlog_len": pa.array(read["queued"]),
                "slowlog_max_len": _const(max_len, n, pa.int64()),
                "log_slower_than_us": _const(10_000, n, pa.int64()),
                "count_requested": _const(-1, n, pa.int64()),
                "entries_returned": pa.array(read["queued"]),
                "args_redacted": _const(True, n, pa.bool_()),
                "tool_client_prefix": _const(CLIENT_NAME_PREFIX, n, pa.string()),
                "read_s": pa.array(read_s),
                "slowlog_reset_calls": _const(0, n, pa.int64()),
                "oldest_queued_id": ids(read["oldest_id"]),
                "newest_queued_id": ids(read["newest_id"]),
                "landed_above_id": ids(cursor),
            },
            run_ids,
            at_s,
            kind,
        )
    }
    if new_entries:
        owner = read["owner"]
        out["slowlog_entries"] = _finish(
            "slowlog_entries",
            s.entries(read["j"], read["restarts"][owner]),
            run_ids.take(pa.array(owner)),
            at_s[owner],
            kind,
        )
    return out


def collection_tables(
    index: int, days: list[date], per_day: int, max_len: int = SLOWLOG_MAX_LEN
) -> dict[str, pa.Table]:
    """Every table the collections of environment `index` land on `days`, run_id first."""
    env, s = profile(index), stream(index, per_day, max_len)
    kind = env.kind(collection=True)
    g = np.concatenate([s.slot_of(d, 0) + np.arange(per_day) for d in days])
    run_ids = pa.array([collection_run_id(d, k, per_day) for d in days for k in range(per_day)])
    n = len(g)
    at_s = s.slot_time_s(g) + 0.4 + 0.03 * index  # the flow's threads reach env after env
    restarts = s.server_of(g)
    uptime_s = (at_s - env.starts_s[restarts]).astype(np.int64)
    servers = pa.array([env.server_run_id(int(r)) for r in range(restarts.max() + 1)])
    server_ids = servers.take(pa.array(restarts))
    versions = pa.array([env.version(r) for r in range(restarts.max() + 1)]).take(
        pa.array(restarts)
    )
    out = slowlog_tables(s, kind, g, at_s, run_ids, server_ids, versions, uptime_s, max_len)
    out |= latency_tables(env, kind, g, at_s, run_ids, server_ids, per_day)
    snap = _counters(env, at_s, uptime_s, server_ids)
    rows = np.repeat(np.arange(n), len(COMMANDS))
    out["commandstats_snapshots"] = _finish(
        "commandstats_snapshots", snap, _rep(run_ids), at_s[rows], kind
    )
    out |= replayed_tables(kind, at_s, run_ids, set(out) | {"runs"}, None)
    out["runs"] = _finish(
        "runs", _run_columns(env, "collect", at_s, 0.013, run_ids), run_ids, at_s, kind
    )
    return {table: data for table, data in out.items() if data.num_rows}


def replayed_tables(
    kind: str, at_s: np.ndarray, run_ids: pa.Array, modelled: set[str], jitter: np.ndarray | None
) -> dict[str, pa.Table]:
    """Every table the real run of `kind` landed rows in that is not `modelled` here: its rows
    replayed once per run (steps among them: the real families, statuses, params)."""
    out = {}
    for table, rows in sorted(kind_shape(kind)["rows"].items()):
        if rows and table not in modelled and table not in STREAM_TABLES and table in TABLES:
            columns, owner = replay(kind, table, at_s, jitter)
            out[table] = _finish(table, columns, run_ids.take(pa.array(owner)), at_s[owner], kind)
    return out


def _rep(run_ids: pa.Array) -> pa.Array:
    """Each run id once per command of a commandstats snapshot."""
    return run_ids.take(pa.array(np.repeat(np.arange(len(run_ids)), len(COMMANDS))))


def _counters(
    env: EnvProfile, at_s: np.ndarray, uptime_s: np.ndarray, server_ids: pa.Array
) -> dict[str, pa.Array]:
    """INFO commandstats at each instant: cumulative since the server started, with a daily
    cycle in the rate (calls and usec only grow within one server process)."""
    rng = np.random.default_rng([env.index, 99])
    rate = rng.uniform(1, 2_000, len(COMMANDS))  # calls/s
    usec = rng.uniform(0.8, 30, len(COMMANDS))
    usec[0] = env.server_us
    phase = 2 * np.pi * (at_s % 86_400) / 86_400
    # d/dt of t + 0.4 sin(wt)/w is 1 + 0.4 cos(wt) > 0: monotone.
    u = uptime_s + 0.4 * 86_400 / (2 * np.pi) * (
        np.sin(phase) - np.sin(phase - 2 * np.pi * uptime_s / 86_400)
    )
    calls = np.floor(np.outer(u, rate)).astype(np.int64)
    n = len(at_s)
    return {
        "server_run_id": server_ids.take(pa.array(np.repeat(np.arange(n), len(COMMANDS)))),
        "uptime_s": pa.array(np.repeat(uptime_s, len(COMMANDS))),
        "taken_at": _ts(np.repeat(at_s + 0.011, len(COMMANDS))),
        "command": pa.array(COMMANDS * n),
        "calls": pa.array(calls.ravel()),
        "usec": pa.array(np.floor(calls * usec).astype(np.int64).ravel()),
        "rejected_calls": _const(0, n * len(COMMANDS), pa.int64()),
        "failed_calls": _const(0, n * len(COMMANDS), pa.int64()),
    }


def _run_columns(
    env: EnvProfile, profile_name: str, at_s: np.ndarray, duration_s: float, run_ids: pa.Array
) -> dict[str, pa.Array]:
    """The runs row of each run (one per instant); site and the like follow the real run."""
    n = len(at_s)
    flow_runs = pc.binary_join_element_wise(
        _const(f"00000000-0000-4000-8000-{env.index:04d}", n, pa.string()), run_ids, "-"
    )
    return {
        "profile": _const(profile_name, n, pa.string()),
        "started_at": _ts(at_s),
        "finished_at": _ts(at_s + duration_s),
        "duration_s": _const(duration_s, n, pa.float64()),
        "status": _const("ok", n, pa.string()),
        "error": pa.nulls(n, pa.string()),
        "mode": _const(env.mode, n, pa.string()),
        "transport": _const(env.transport, n, pa.string()),
        "url": _const(env.url, n, pa.string()),
        "host_group": _const(env.host_group, n, pa.string()),
        "same_server_as": pa.nulls(n, pa.string()),
        "prober_on_host": _const(env.prober_on_host, n, pa.bool_()),
        "tool_version": _const(__version__, n, pa.string()),
        "prober_hostname": _const(f"prober-{env.index % 4}", n, pa.string()),
        "prober_pid": pa.array(4_000 + (np.arange(n) * 7 + env.index) % 60_000, pa.int64()),
        "flow_run_id": flow_runs,
    }


def _histogram(
    rng: random.Random, window: int, median_us: float, samples: int
) -> tuple[list[dict], float, float, float]:
    """Log-normal RTTs (sigma 0.35 in ln) on the probe's 2 % buckets, with a thin slow tail
    (0.5 % of the samples, up to 150x the median): about 130 non-empty buckets a window, as
    the real nightly's 5-second windows land; rows, and the exact min, max and mean."""
    log_growth = math.log(BUCKET_GROWTH)
    centre = math.log(median_us) / log_growth
    sigma_buckets = 0.35 / log_growth
    rows: list[tuple[int, int]] = []
    first = math.floor(centre - 3 * sigma_buckets)
    last = math.ceil(centre + 3 * sigma_buckets)
    for bucket in range(first, last + 1):
        z = (bucket + 0.5 - centre) / sigma_buckets
        count = int(samples * math.exp(-z * z / 2) / (sigma_buckets * math.sqrt(2 * math.pi)))
        if count:
            rows.append((bucket, count))
    for _ in range(max(2, samples // 200)):
        rows.append((math.floor(centre + 3 * sigma_buckets + rng.uniform(1, 200)), 1))
    merged: dict[int, int] = defaultdict(int)
    for bucket, count in rows:
        merged[bucket] += count
    out, total, weighted = [], 0, 0.0
    for bucket in sorted(merged):
        low, high = BUCKET_GROWTH**bucket, BUCKET_GROWTH ** (bucket + 1)
        total += merged[bucket]
        weighted += merged[bucket] * math.sqrt(low * high)
        out.append(
            {"window_idx": window, "bucket": bucket, "low_us": low, "high_us": high,
             "count": merged[bucket]}
        )  # fmt: skip
    lo = BUCKET_GROWTH ** min(merged)
    hi = BUCKET_GROWTH ** (max(merged) + 1)
    return out, lo * 1.001, hi * 0.999, weighted / total


def nightly_rows(
    index: int, day: date, per_day: int, keys: int, max_len: int = SLOWLOG_MAX_LEN
) -> dict[str, list[dict]]:
    """Every table one nightly run of environment `index` lands on `day` as row dicts, but
    keyspace_keys (see `keyspace_keys`)."""
    env = profile(index)
    night = night_of(day)
    rng = random.Random(f"{index}:{night}")
    at = datetime.combine(day, NIGHTLY_AT, tzinfo=UTC) + timedelta(seconds=45 * index)
    restarts = env.restarts_at(epoch_s(at))
    version = env.version(restarts)
    server_run_id = env.server_run_id(restarts)
    uptime_s = int(epoch_s(at) - env.starts_s[restarts])
    jitter = 1 + rng.gauss(0, env.noise)
    version_gain = 1 - 0.03 * VERSIONS.index(version)
    rtt_median_us = env.rtt_us * env.factor(env.rtt_steps, night) * jitter
    server_us = env.server_us * version_gain * (1 + rng.gauss(0, env.noise / 2))
    load_1m = max(0.0, rng.gauss(0.6, 0.3))
    landed = kind_shape(env.kind(collection=False))["rows"]
    tables: dict[str, list[dict]] = {}
    fingerprint = {
        ("server", "redis_version"): version,
        ("server", "redis_mode"): "standalone",
        ("server", "os"): "Linux 6.1.0-27-amd64 x86_64",
        ("server", "arch_bits"): "64",
        ("server", "multiplexing_api"): "epoll",
        ("server", "gcc_version"): "12.2.0",
        ("server", "process_id"): str(1000 + restarts),
        ("server", "run_id"): server_run_id,
        ("server", "tcp_port"): "6379",
        ("server", "uptime_in_seconds"): str(uptime_s),
        ("server", "uptime_in_days"): str(uptime_s // 86_400),
        ("server", "hz"): "10",
        ("server", "executable"): "/usr/bin/redis-server",
        ("server", "io_threads_active"): "0",
        ("memory", "used_memory"): str(int(keys * 180 + rng.uniform(0, 5e5))),
        ("memory", "used_memory_rss"): str(int(keys * 200 + 9e6 + rng.uniform(0, 1e6))),
        ("memory", "used_memory_peak"): str(int(keys * 190)),
        ("memory", "maxmemory"): "0",
        ("memory", "maxmemory_policy"): "noeviction",
        ("memory", "mem_fragmentation_ratio"): f"{rng.uniform(1.05, 1.3):.2f}",
        ("memory", "mem_allocator"): "jemalloc-5.3.0",
        ("persistence", "loading"): "0",
        ("persistence", "rdb_changes_since_last_save"): str(rng.randint(0, 1000)),
        ("persistence", "aof_enabled"): "0",
        ("clients", "connected_clients"): str(rng.randint(2, 40)),
        ("clients", "blocked_clients"): "0",
        ("keyspace", "db0"): f"keys={keys},expires={keys // 5},avg_ttl=86400000",
        ("config", "slowlog-log-slower-than"): "10000",
        ("config", "slowlog-max-len"): str(max_len),
        ("config", "latency-monitor-threshold"): "1" if env.latency_monitor else "0",
        ("config", "maxmemory"): "0",
        ("config", "maxmemory-policy"): "noeviction",
        ("config", "save"): "",
        ("config", "appendonly"): "no",
        ("config", "appendfsync"): "everysec",
        ("config", "io-threads"): "1",
        ("config", "hz"): "10",
        ("probe", "mode"): env.mode,
        ("probe", "transport"): env.transport,
        ("probe", "prober_on_host"): str(env.prober_on_host).lower(),
        ("probe", "url"): env.url,
        ("probe", "same_server_as"): "",
        ("prober", "hostname"): env.host_group,
        ("prober", "os"): "Linux 6.1.0-27-amd64 x86_64",
        ("prober", "cores"): str(env.cores),
        ("prober", "cpu_model"): env.cpu_model,
        ("prober", "load_1m"): f"{load_1m:.2f}",
        ("prober", "load_5m"): f"{load_1m * 0.9:.2f}",
        ("prober", "load_15m"): f"{load_1m * 0.8:.2f}",
        ("prober", "python"): "3.11.2",
        ("prober", "redis_py"): "5.2.1",
        ("prober", "tool_version"): __version__,
    }
    # The rest of what the real run's INFO and CONFIG said, as it said it.
    for row in kind_shape(env.kind(collection=False))["examples"].get("fingerprint", []):
        fingerprint.setdefault((row.get("section"), row.get("key")), row.get("value"))
    tables["fingerprint"] = [
        {"section": s, "key": k, "value": v} for (s, k), v in fingerprint.items()
    ]
    windows, histogram, counters, percentiles = [], [], [], []
    calls = {c: 1000 + uptime_s // 86_400 * rng.randint(500, 5000) for c in COMMANDS}
    usec_per_call = {c: (server_us if c == "ping" else rng.uniform(1, 30)) for c in COMMANDS}
    for w in range(WINDOWS):
        t0 = at + timedelta(seconds=10 + 5.2 * w)
        # 5-second windows at 1 ms pacing, as the real nightly's (~4,000 samples each).
        samples = int(PING_WINDOW_S * 1e6 / (rtt_median_us + 1000))
        rows, lo, hi, mean = _histogram(rng, w, rtt_median_us, samples)
        samples = sum(r["count"] for r in rows)
        histogram += rows
        windows.append(
            {"window_idx": w, "started_at": t0, "window_s": PING_WINDOW_S, "interval_ms": 1.0,
             "samples": samples, "rtt_min_us": lo, "rtt_max_us": hi, "rtt_mean_us": mean,
             "host_busy_share": rng.uniform(0.05, 0.4)}
        )  # fmt: skip
        for phase in ("before", "after"):
            if phase == "after":
                calls["ping"] += samples
                for c in COMMANDS[1:]:
                    calls[c] += rng.randint(0, 50)
            counters += [
                {"window_idx": w, "phase": phase, "taken_at": t0, "command": c,
                 "calls": calls[c], "usec": int(calls[c] * usec_per_call[c]),
                 "rejected_calls": 0, "failed_calls": 0}
                for c in COMMANDS
            ]  # fmt: skip
        percentiles += [
            {"window_idx": w, "taken_at": t0, "command": c, "percentile": p,
             "latency_us": usec_per_call[c] * m}
            for c in COMMANDS
            for p, m in ((50.0, 1.0), (99.0, 2.5), (99.9, 6.0))
        ]  # fmt: skip
    tables["ping_windows"] = windows
    tables["ping_histogram"] = histogram  # a detail table: nightly_run keeps it or not
    tables["commandstats"] = counters
    tables["latencystats"] = percentiles
    # The nightly's own slowlog, latency and counters families read what a collection reads.
    at_s = np.array([epoch_s(at) + 20.0])
    snap = _counters(env, at_s, np.array([uptime_s + 20]), pa.array([server_run_id]))
    tables["commandstats_snapshots"] = pa.table(snap).to_pylist()
    if landed.get("intrinsic") and env.prober_on_host:
        avg_ns = 30 * version_gain * (1 + rng.gauss(0, 0.02))
        max_us = rng.uniform(30, 400)
        tables["intrinsic"] = [
            {"started_at": at + timedelta(seconds=3), "duration_s": 1.0, "max_us": max_us,
             "max_updates": rng.randint(3, 12), "total_runs": int(1e9 / avg_ns),
             "avg_us_per_run": avg_ns / 1000, "avg_ns_per_run": avg_ns,
             "worst_over_avg_printed": max_us * 1000 / avg_ns, "host_busy_share": 0.3,
             "load_1m_before": load_1m, "tool_path": "/usr/bin/redis-cli",
             "tool_version": version}
        ]  # fmt: skip
    if landed.get("benchmark"):
        tables["benchmark"] = _benchmark(env, rng, night, at, version_gain, version)
    tables["keyspace_scans"] = [_scan_row(at, keys, rng)]
    tables["keyspace_commandstats"] = [
        {"phase": phase, "command": c, "calls": calls_n, "usec": calls_n * 3,
         "failed_calls": 0}
        for phase, scale in (("before", night), ("after", night + 1))
        for c, calls_n in ((c, scale * keys // (1 if c != "scan" else 1000)) for c in
                           KEYSPACE_COMMANDS)
    ]  # fmt: skip
    return tables


def _scan_row(at: datetime, keys: int, rng: random.Random) -> dict:
    """The keyspace_scans row of a complete scan of `keys` keys."""
    wall_s = keys / 20_000 * rng.uniform(0.9, 1.2)
    return {
        "started_at": at + timedelta(seconds=60), "wall_s": wall_s, "paused_s": wall_s * 0.6,
        "stop_reason": "complete", "max_keys": max(keys, 100_000), "busy_share_cap": 0.05,
        "max_wall_s": 300.0, "scan_count": 1000, "memory_samples": None, "separators": ":",
        "depth": 1, "top_keys": 10, "projection_factor": 2.0, "db": 0,
        "dbsize_before": keys, "dbsize_after": keys + rng.randint(-50, 50), "keys_other_dbs": 0,
        "used_memory_before_bytes": keys * 180, "used_memory_after_bytes": keys * 180 + 4096,
        "server_cpu_before_s": 1000.0, "server_cpu_after_s": 1000.0 + wall_s * 0.04,
        "rounds": keys // 1000 + 1, "scan_calls": keys // 1000 + 1, "duplicates": 0,
        "vanished": rng.randint(0, 20), "guesses_wrong": 0, "errors": 0, "first_error": None,
    }  # fmt: skip


def _benchmark(
    env: EnvProfile,
    rng: random.Random,
    night: int,
    at: datetime,
    version_gain: float,
    version: str,
) -> list[dict]:
    """redis-benchmark rows of one nightly run (48: tests x clients x pipeline x payload x 3)."""
    rps_base = env.rps * env.factor([env.rps_step], night) / version_gain
    rows = []
    for test in ("SET", "GET"):
        for clients in (1, 50):
            for pipeline in (1, 16):
                for payload in (3, 100):
                    for rep in range(3):
                        rps = (
                            rps_base
                            * (1 + 4 * (clients > 1))
                            * (1 + 9 * (pipeline > 1))
                            * (1.05 if test == "GET" else 1.0)
                            * (1 + rng.gauss(0, env.noise))
                        )
                        p50_ms = max(0.001, round(clients * pipeline / rps * 1000, 3))
                        rows.append(
                            {"repetition": rep, "clients": clients, "pipeline": pipeline,
                             "payload_bytes": payload, "requests": 5000, "test": test,
                             "status": "ok", "error": None, "rps": rps,
                             "avg_ms": p50_ms * 1.1, "min_ms": p50_ms * 0.3, "p50_ms": p50_ms,
                             "p95_ms": p50_ms * 2, "p99_ms": p50_ms * 3, "max_ms": p50_ms * 10,
                             "started_at": at + timedelta(seconds=30), "elapsed_s": 5000 / rps,
                             "host_busy_share": 0.9, "tool_version": version}
                        )  # fmt: skip
    return rows


def keyspace_keys(index: int, day: date, keys: int) -> pa.Table:
    """The keys one nightly scan samples (without run_id): 1 % of the key space renewed each
    night, sizes per prefix, in SCAN's hash order."""
    night = night_of(day)
    salt = index * 7_919 + 3
    ids = np.arange(keys, dtype=np.int64) + night * max(1, keys // 100)
    shares = np.cumsum([p[1] for p in PREFIXES])
    kind = np.searchsorted(shares / shares[-1], _unit(ids, salt), side="right")
    kind = np.minimum(kind, len(PREFIXES) - 1)
    typical = np.array([p[4] for p in PREFIXES], np.float64)[kind]
    per_element = np.array([p[5] for p in PREFIXES], np.float64)[kind]
    spread = np.exp(1.0 * (_unit(ids, salt + 1) - 0.5) * 2)
    elements = np.maximum(1, np.round(typical * spread)).astype(np.int64)
    drift = 1 + 0.02 * (_unit(ids * 1_000 + night, salt + 2) - 0.5)
    memory = np.round((56 + elements * per_element) * drift).astype(np.int64)
    order = np.argsort(_mix(ids, salt + 3))
    kind_arr = pa.array(kind[order])
    prefix_names = pa.array([p[0] for p in PREFIXES], pa.string())
    key = pc.binary_join_element_wise(
        prefix_names.take(kind_arr), pc.cast(pa.array(ids[order]), pa.string()), ""
    )
    shown = pa.array([f"{p[0]}*" if p[0] else "(no prefix)" for p in PREFIXES], pa.string())
    return pa.table(
        {
            "key": key,
            "prefix": shown.take(kind_arr),
            "type": pa.array([p[2] for p in PREFIXES]).take(kind_arr),
            "encoding": pa.array([p[3] for p in PREFIXES]).take(kind_arr),
            "elements": pa.array(elements[order]),
            "memory_usage_bytes": pa.array(memory[order]),
        }
    )


# Nightly tables modelled here; the others a real run landed are replayed (`replayed_tables`).
NIGHTLY_MODELLED = frozenset(
    {
        "runs", "fingerprint", "ping_windows", "ping_histogram", "commandstats", "latencystats",
        "commandstats_snapshots", "intrinsic", "benchmark", "keyspace_scans",
        "keyspace_commandstats", "keyspace_keys", "slowlog_collections", "slowlog_entries",
        "latency_collections", "latency_latest", "latency_history",
    }
)  # fmt: skip


def nightly_run(
    index: int, day: date, per_day: int, keys: int, max_len: int, with_detail: bool
) -> dict[str, pa.Table]:
    """Every table one nightly run of environment `index` lands on `day` (run_id first), the
    detail tables only `with_detail` (older nights' were dropped by retention)."""
    env = profile(index)
    kind = env.kind(collection=False)
    landed = kind_shape(kind)["rows"]
    run_id = nightly_run_id(day)
    at = datetime.combine(day, NIGHTLY_AT, tzinfo=UTC) + timedelta(seconds=45 * index)
    at_s = np.array([epoch_s(at)])
    rows = nightly_rows(index, day, per_day, keys, max_len)
    tables: dict[str, pa.Table] = {}
    for table, table_rows in rows.items():
        if not table_rows or not landed.get(table):
            continue  # the real run of this kind lands no such rows
        data = pa.Table.from_pylist(table_rows)
        n = data.num_rows
        tables[table] = _finish(
            table,
            {c: data[c].combine_chunks() for c in data.column_names},
            pa.array([run_id] * n, pa.string()),
            np.full(n, at_s[0]),
            kind,
        )
    if with_detail and landed.get("keyspace_keys"):
        data = keyspace_keys(index, day, keys)
        tables["keyspace_keys"] = _finish(
            "keyspace_keys",
            {c: data[c].combine_chunks() for c in data.column_names},
            pa.array(np.full(data.num_rows, run_id, dtype=object), pa.string()),
            np.full(data.num_rows, at_s[0]),
            kind,
        )
    # The nightly's own SLOWLOG and latency reads, 20 s after the 02:00 collection: nothing
    # new to land since it, the queue as read and the cursor recorded.
    s = stream(index, per_day, max_len)
    read_at = at_s + 20.0
    g = ((read_at - s.origin_s) // s.step_s).astype(np.int64)
    restarts = s.server_of(g)
    server_ids = pa.array([env.server_run_id(int(r)) for r in restarts])
    versions = pa.array([env.version(int(r)) for r in restarts])
    uptime_s = (read_at - env.starts_s[restarts]).astype(np.int64)
    run_ids = pa.array([run_id])
    for table, data in (
        slowlog_tables(s, kind, g, read_at, run_ids, server_ids, versions, uptime_s, max_len,
                       new_entries=False)
        | latency_tables(env, kind, g, read_at, run_ids, server_ids, per_day,
                         new_history=False)
    ).items():  # fmt: skip
        if table in landed:
            tables[table] = data
    rng = random.Random(f"replay:{index}:{night_of(day)}")
    jitter = np.array([1 + rng.gauss(0, env.noise)])
    replayed = replayed_tables(kind, at_s, run_ids, NIGHTLY_MODELLED, jitter)
    if "steps" in replayed and not env.prober_on_host:
        # The intrinsic family needs the server's host: skipped where the prober is elsewhere.
        steps = replayed["steps"]
        intrinsic = pc.equal(steps["family"], "intrinsic")
        status = pc.if_else(intrinsic, "skipped", steps["status"])
        replayed["steps"] = steps.set_column(steps.schema.get_field_index("status"), "status",
                                             status)  # fmt: skip
    tables |= replayed
    duration_s = float(_example(kind, "runs", "duration_s") or 90.0)
    profile_name = str(_example(kind, "runs", "profile") or "nightly")
    tables["runs"] = _finish(
        "runs", _run_columns(env, profile_name, at_s, duration_s, run_ids), run_ids, at_s, kind
    )
    if not with_detail:
        for table in DETAIL_TABLES:
            tables.pop(table, None)
    return {table: data for table, data in tables.items() if data.num_rows}


def nightly_tables(
    index: int,
    days: list[date],
    per_day: int,
    keys: int,
    max_len: int = SLOWLOG_MAX_LEN,
    detail_for: frozenset[date] = frozenset(),
) -> tuple[dict[str, pa.Table], dict[str, dict[str, pa.Table]]]:
    """The nightly runs of `days`: merged tables (run_id first) and, per run id of a day in
    `detail_for`, its detail tables (without run_id, as a task hands them to delta.write)."""
    parts: dict[str, list[pa.Table]] = defaultdict(list)
    detail: dict[str, dict[str, pa.Table]] = {}
    for day in days:
        run_id = nightly_run_id(day)
        tables = nightly_run(index, day, per_day, keys, max_len, day in detail_for)
        for table in DETAIL_TABLES:
            if table in tables:
                data = tables.pop(table)
                detail.setdefault(run_id, {})[table] = data.drop_columns(
                    ["run_id", "schema_version"]
                )
        for table, data in tables.items():
            parts[table].append(data)
    merged = {table: pa.concat_tables(tables) for table, tables in parts.items()}
    return merged, detail


def day_tables(
    index: int,
    days: list[date],
    per_day: int,
    keys: int,
    max_len: int = SLOWLOG_MAX_LEN,
    detail_for: frozenset[date] = frozenset(),
) -> tuple[dict[str, pa.Table], dict[str, dict[str, pa.Table]]]:
    """Collections and nightly runs of `days` for one environment: each merged table sorted by
    run id as compaction sorts it, and the nightly detail tables per run id."""
    collected = collection_tables(index, days, per_day, max_len) if per_day else {}
    nightly, detail = nightly_tables(index, days, per_day or 1, keys, max_len, detail_for)
    merged: dict[str, pa.Table] = {}
    for table in sorted(set(collected) | set(nightly)):
        parts = [t for t in (collected.get(table), nightly.get(table)) if t is not None]
        data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        merged[table] = data.sort_by([("run_id", "ascending")])
    return merged, detail
