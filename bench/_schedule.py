"""The synthetic schedule of bench/retention.py: 50 environments, a nightly run and a collection
every few minutes each, as Arrow tables in the lake's file schema (run_id first).

Everything is a pure function of (environment index, UTC day, collections per day, keys), so a
month generated for a 365-day lake and for a 730-day lake is the same file. Shapes follow what
the tasks land: a collection (flows/collect.py) lands runs (1 row, profile 'collect'), steps (3),
slowlog_collections (1), slowlog_entries (the whole queue: SLOWLOG GET -1 re-reads up to
slowlog-max-len entries every time), latency_collections (1; the monitor is off, so
latency_latest and latency_history land no file) and commandstats_snapshots (one row per
command, cumulative since the server started). A nightly run lands the old generator's tables
plus the key-space scan (keyspace_scans, keyspace_commandstats, keyspace_keys)."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from yardstick import CLIENT_NAME_PREFIX, __version__
from yardstick.storage.schemas import SCHEMA_VERSION, file_schema, to_table

# Bump when generated content changes: cached units of an older generator are not reused.
GENERATOR = "3"
# The last day of every lake is the night before TONIGHT; tonight is landed by the bench.
TONIGHT = date(2025, 12, 31)
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
BUCKET_GROWTH = 1.02  # the probe's histogram: 2 % buckets (tasks/roundtrip.py)
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
        slots = (TONIGHT - ORIGIN_DAY).days * per_day + per_day
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


def _finish(table: str, columns: dict[str, pa.Array], run_ids: pa.Array) -> pa.Table:
    """A table in the lake file schema: run_id and schema_version first, types cast."""
    schema = file_schema(table)
    n = len(run_ids)
    columns = {
        "run_id": run_ids,
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION, np.int16)),
        **columns,
    }
    return pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema)


def _const(value: object, n: int, type_: pa.DataType) -> pa.Array:
    """`n` copies of one value."""
    return pa.array([value] * n, type_) if n < 64 else pa.repeat(pa.scalar(value, type_), n)


def collection_tables(
    index: int, days: list[date], per_day: int, max_len: int = SLOWLOG_MAX_LEN
) -> dict[str, pa.Table]:
    """Every table the collections of environment `index` land on `days`, run_id first."""
    env, s = profile(index), stream(index, per_day, max_len)
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
    counts, j, owner = s.queue(g)
    read_s = 0.0015 + counts * 0.00002
    out: dict[str, pa.Table] = {}
    out["slowlog_collections"] = _finish(
        "slowlog_collections",
        {
            "server_run_id": server_ids,
            "redis_version": versions,
            "uptime_s": pa.array(uptime_s),
            "collected_at": _ts(at_s + read_s),
            "slowlog_len": pa.array(counts),
            "slowlog_max_len": _const(max_len, n, pa.int64()),
            "log_slower_than_us": _const(10_000, n, pa.int64()),
            "count_requested": _const(-1, n, pa.int64()),
            "entries_returned": pa.array(counts),
            "args_redacted": _const(True, n, pa.bool_()),
            "tool_client_prefix": _const(CLIENT_NAME_PREFIX, n, pa.string()),
            "read_s": pa.array(read_s),
        },
        run_ids,
    )
    out["slowlog_entries"] = _finish(
        "slowlog_entries", s.entries(j, restarts[owner]), run_ids.take(pa.array(owner))
    )
    out["latency_collections"] = _finish(
        "latency_collections",
        {
            "server_run_id": server_ids,
            "collected_at": _ts(at_s + 0.01),
            "threshold_ms": _const(0, n, pa.int64()),
            "events": _const(0, n, pa.int32()),
            "doctor_text": _const(DOCTOR_OFF, n, pa.string()),
            "error": pa.nulls(n, pa.string()),
        },
        run_ids,
    )
    out["commandstats_snapshots"] = _finish(
        "commandstats_snapshots", _counters(env, at_s, uptime_s, server_ids), _rep(run_ids)
    )
    families = ["slowlog", "latency_monitor", "counters"]
    step_at = np.repeat(at_s, 3) + np.tile(np.array([0.0, 0.004, 0.008]), n)
    out["steps"] = _finish(
        "steps",
        {
            "family": pa.array(families * n),
            "status": _const("ok", 3 * n, pa.string()),
            "reason": pa.nulls(3 * n, pa.string()),
            "started_at": _ts(step_at),
            "finished_at": _ts(step_at + 0.003),
            "duration_s": _const(0.003, 3 * n, pa.float64()),
            "window_s": _const(0.0, 3 * n, pa.float64()),
        },
        run_ids.take(pa.array(np.repeat(np.arange(n), 3))),
    )
    out["runs"] = _finish("runs", _run_columns(env, "collect", at_s, 0.013), run_ids)
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
    env: EnvProfile, profile_name: str, at_s: np.ndarray, duration_s: float
) -> dict[str, pa.Array]:
    """The runs row of each run (one per instant)."""
    n = len(at_s)
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
    }


def _histogram(
    rng: random.Random, window: int, median_us: float, samples: int
) -> tuple[list[dict], float, float, float]:
    """Log-normal RTTs (sigma 0.2 in ln) on the probe's 2 % buckets, about 60 non-empty, with
    a thin slow tail; rows, and the exact min, max and mean they stand for."""
    log_growth = math.log(BUCKET_GROWTH)
    centre = math.log(median_us) / log_growth
    sigma_buckets = 0.2 / log_growth
    rows: list[tuple[int, int]] = []
    first = math.floor(centre - 3 * sigma_buckets)
    last = math.ceil(centre + 3 * sigma_buckets)
    for bucket in range(first, last + 1):
        z = (bucket + 0.5 - centre) / sigma_buckets
        count = int(samples * math.exp(-z * z / 2) / (sigma_buckets * math.sqrt(2 * math.pi)))
        if count:
            rows.append((bucket, count))
    for _ in range(rng.randint(2, 5)):
        rows.append((math.floor(centre + rng.uniform(28, 82)), 1))
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
    scratch = env.mode == "scratch"
    families = ["fingerprint", "round_trip", "slowlog", "latency_monitor", "counters"]
    if scratch and env.prober_on_host:
        families.insert(1, "intrinsic")
    if scratch:
        families.append("throughput")
    families.append("keyspace")
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
        ("config", "latency-monitor-threshold"): "0",
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
    tables["fingerprint"] = [
        {"section": s, "key": k, "value": v} for (s, k), v in fingerprint.items()
    ]
    windows, histogram, counters, percentiles = [], [], [], []
    calls = {c: 1000 + uptime_s // 86_400 * rng.randint(500, 5000) for c in COMMANDS}
    usec_per_call = {c: (server_us if c == "ping" else rng.uniform(1, 30)) for c in COMMANDS}
    for w in range(WINDOWS):
        t0 = at + timedelta(seconds=10 + 1.2 * w)
        samples = int(1e6 / (rtt_median_us + 1000))
        rows, lo, hi, mean = _histogram(rng, w, rtt_median_us, samples)
        samples = sum(r["count"] for r in rows)
        histogram += rows
        windows.append(
            {"window_idx": w, "started_at": t0, "window_s": 1.0, "interval_ms": 1.0,
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
    tables["ping_histogram"] = histogram
    tables["commandstats"] = counters
    tables["latencystats"] = percentiles
    # The nightly's own slowlog, latency and counters families read what a collection reads.
    at_s = np.array([epoch_s(at) + 20.0])
    snap = _counters(env, at_s, np.array([uptime_s + 20]), pa.array([server_run_id]))
    tables["commandstats_snapshots"] = pa.table(snap).to_pylist()
    s = stream(index, per_day, max_len)
    g = np.array([int((at_s[0] - s.origin_s) // s.step_s)])
    counts, j, _owner = s.queue(g)
    tables["slowlog_collections"] = [
        {"server_run_id": server_run_id, "redis_version": version, "uptime_s": uptime_s,
         "collected_at": at + timedelta(seconds=20), "slowlog_len": int(counts[0]),
         "slowlog_max_len": max_len, "log_slower_than_us": 10_000, "count_requested": -1,
         "entries_returned": int(counts[0]), "args_redacted": True,
         "tool_client_prefix": CLIENT_NAME_PREFIX, "read_s": 0.004}
    ]  # fmt: skip
    tables["slowlog_entries"] = (
        pa.table(s.entries(j, np.full(len(j), restarts))).to_pylist() if len(j) else []
    )
    tables["latency_collections"] = [
        {"server_run_id": server_run_id, "collected_at": at + timedelta(seconds=21),
         "threshold_ms": 0, "events": 0, "doctor_text": DOCTOR_OFF, "error": None}
    ]  # fmt: skip
    if "intrinsic" in families:
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
    if "throughput" in families:
        tables["benchmark"] = _benchmark(env, rng, night, at, version_gain, version)
    tables["keyspace_scans"] = [_scan_row(at, keys, rng)]
    tables["keyspace_commandstats"] = [
        {"phase": phase, "command": c, "calls": calls_n, "usec": calls_n * 3,
         "failed_calls": 0}
        for phase, scale in (("before", night), ("after", night + 1))
        for c, calls_n in ((c, scale * keys // (1 if c != "scan" else 1000)) for c in
                           KEYSPACE_COMMANDS)
    ]  # fmt: skip
    duration_s = 90.0
    tables["steps"] = [
        {"family": f, "status": "ok", "reason": None, "started_at": at,
         "finished_at": at + timedelta(seconds=5), "duration_s": 5.0,
         "window_s": 5.0 if f == "round_trip" else None}
        for f in families
    ]  # fmt: skip
    tables["runs"] = pa.table(
        _run_columns(env, "nightly", np.array([epoch_s(at)]), duration_s)
    ).to_pylist()
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


def nightly_tables(
    index: int,
    days: list[date],
    per_day: int,
    keys: int,
    max_len: int = SLOWLOG_MAX_LEN,
    detail_for: frozenset[date] = frozenset(),
) -> tuple[dict[str, pa.Table], dict[str, dict[str, pa.Table]]]:
    """The nightly runs of `days`: merged tables (run_id first) and, per run id of a day in
    `detail_for`, its detail tables (without run_id, as a task hands them to lake.write)."""
    parts: dict[str, list[pa.Table]] = defaultdict(list)
    detail: dict[str, dict[str, pa.Table]] = {}
    for day in days:
        run_id = nightly_run_id(day)
        rows = nightly_rows(index, day, per_day, keys, max_len)
        histogram = rows.pop("ping_histogram")
        if day in detail_for:
            detail[run_id] = {
                "ping_histogram": to_table("ping_histogram", histogram),
                "keyspace_keys": keyspace_keys(index, day, keys),
            }
        for table, table_rows in rows.items():
            if not table_rows:
                continue
            data = to_table(table, table_rows)
            ids = pa.array([run_id] * data.num_rows, pa.string())
            parts[table].append(_finish(table, {c: data[c] for c in data.column_names}, ids))
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
