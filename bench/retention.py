"""Retention and scale: a synthetic lake of nightly runs in the real lake format, then the
warehouse build time (one and two years), a trend query, change points and one report.

    .venv/bin/python bench/retention.py [--days 365] [--envs 50] [--lake-root /tmp]
        [--work DIR] [--workers N] [--no-double] [--no-breakdown] [--what-if]

Lakes are cached as <lake-root>/yardstick-bench-lake-<days>x<envs> and reused. Generation is
deterministic per (environment, night), so a smaller lake is hard links into a larger one, and
an interrupted generation resumes environment by environment. Targets (issue 6): the year x 50
build <= 10 s, twice the data <= 2.1x the time, a trend query <= 100 ms.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from yardstick import lake, warehouse
from yardstick.changepoints import series_change_points
from yardstick.schemas import TABLES, file_schema, to_table

BUILD_TARGET_S = 10.0
RATIO_TARGET = 2.1
TREND_TARGET_MS = 100.0
FIRST_NIGHT = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
# Marks a finished lake (or, as .<env>.complete, one finished environment of it): whatever
# has no mark was interrupted and is generated again.
COMPLETE = ".complete"
# Written into each mark: a lake made by an older generator is made again, not reused.
GENERATOR = "2"
VERSIONS = ["7.0.15", "7.2.4", "7.2.5", "7.4.1", "7.4.2", "8.0.2", "8.2.1"]
CPUS = ["AMD EPYC 7763 64-Core Processor", "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"]
# INFO commandstats names as a busy server lists them (subcommands as Redis 7 writes them).
COMMANDS = (
    "ping get set del exists expire ttl incr hget hset hgetall lpush lrange sadd smembers"
    " zadd zrange info config|get client|setname"
).split()
WINDOWS = 5
BUCKET_GROWTH = 1.02  # the probe's histogram: 2 % buckets (tasks/roundtrip.py)
TREND_SQL = (
    "select started_at, value from figure_trends where env = ? and figure = 'rtt_client_p99_us'"
    " and subject = '' order by started_at"
)


def lake_path(root: Path, days: int, envs: int) -> Path:
    """Where the lake of `days` nights for `envs` environments is cached."""
    return root / f"yardstick-bench-lake-{days}x{envs}"


def env_name(index: int) -> str:
    """Environment names as a config would hold them."""
    return f"env-{index:02d}"


def night_run_id(night: int) -> str:
    """One nightly flow run measures every environment under one run id, as flows/nightly does."""
    at = FIRST_NIGHT + timedelta(days=night)
    return f"{at:%Y%m%dT%H%M%SZ}-{night % 0xFFFFFF:06x}"


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
        # A Redis upgrade every 120 to 300 nights; it restarts the server.
        self.upgrades, night = [], rng.randrange(20, 200)
        while night < horizon_nights:
            self.upgrades.append(night)
            night += rng.randrange(120, 300)
        self.first_version = rng.randrange(0, 3)

    def version_index(self, night: int) -> int:
        """Index into VERSIONS of the Redis running on this night."""
        return min(self.first_version + sum(u <= night for u in self.upgrades), len(VERSIONS) - 1)

    def factor(self, steps: list[tuple[int, float]], night: int) -> float:
        """Product of the step factors in effect on this night."""
        return math.prod(f for at, f in steps if at <= night)


def _histogram(
    rng: random.Random, window: int, median_us: float, samples: int
) -> tuple[list[dict], float, float, float]:
    """Log-normal RTTs (sigma 0.2 in ln: p99 about 1.6x the median) on the probe's 2 % buckets,
    about 60 of them non-empty, with a thin slow tail; rows, and the exact min, max and mean
    they stand for."""
    log_growth = math.log(BUCKET_GROWTH)
    centre = math.log(median_us) / log_growth
    sigma_buckets = 0.2 / log_growth
    rows, total, weighted = [], 0, 0.0
    first = math.floor(centre - 3 * sigma_buckets)
    last = math.ceil(centre + 3 * sigma_buckets)
    for bucket in range(first, last + 1):
        z = (bucket + 0.5 - centre) / sigma_buckets
        count = int(samples * math.exp(-z * z / 2) / (sigma_buckets * math.sqrt(2 * math.pi)))
        if count:
            rows.append((bucket, count))
    # The tail: a few slow PINGs 1.7x to 5x the median (scheduler, other processes), fewer
    # than 1 % so the p99 stays in the body and the p99.9 and the maximum land here.
    for _ in range(rng.randint(2, 5)):
        bucket = math.floor(centre + rng.uniform(28, 82))
        rows.append((bucket, 1))
    merged: dict[int, int] = defaultdict(int)
    for bucket, count in rows:
        merged[bucket] += count
    out = []
    for bucket in sorted(merged):
        low, high = BUCKET_GROWTH**bucket, BUCKET_GROWTH ** (bucket + 1)
        total += merged[bucket]
        weighted += merged[bucket] * math.sqrt(low * high)
        out.append(
            {
                "window_idx": window,
                "bucket": bucket,
                "low_us": low,
                "high_us": high,
                "count": merged[bucket],
            }
        )
    lo = BUCKET_GROWTH ** min(merged)
    hi = BUCKET_GROWTH ** (max(merged) + 1)
    return out, lo * 1.001, hi * 0.999, weighted / total


def run_tables(env: EnvProfile, night: int) -> dict[str, list[dict]]:
    """Every lake table one nightly run of `env` lands, as row dicts."""
    rng = random.Random(f"{env.index}:{night}")
    at = FIRST_NIGHT + timedelta(days=night, seconds=45 * env.index)
    version = VERSIONS[env.version_index(night)]
    # The server restarts at each upgrade: a new run id, uptime and counters from zero.
    restarts = sum(u <= night for u in env.upgrades)
    server_run_id = f"{env.index:04x}{restarts:04x}".ljust(40, "0")
    started_night = max([0, *[u for u in env.upgrades if u <= night]])
    uptime_s = (night - started_night) * 86_400 + 3_600
    jitter = 1 + rng.gauss(0, env.noise)
    # A newer Redis is a little faster: absolutes move at an upgrade, ratios barely.
    version_gain = 1 - 0.03 * env.version_index(night)
    rtt_median_us = env.rtt_us * env.factor(env.rtt_steps, night) * jitter
    server_us = env.server_us * version_gain * (1 + rng.gauss(0, env.noise / 2))
    load_1m = max(0.0, rng.gauss(0.6, 0.3))
    scratch = env.mode == "scratch"
    families = ["fingerprint", "round_trip", "slowlog", "latency_monitor", "counters"]
    if scratch and env.prober_on_host:
        families.insert(1, "intrinsic")
    if scratch:
        families.append("throughput")

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
        ("server", "tcp_port"): str(6379 + env.index),
        ("server", "uptime_in_seconds"): str(uptime_s),
        ("server", "uptime_in_days"): str(uptime_s // 86_400),
        ("server", "hz"): "10",
        ("server", "executable"): "/usr/bin/redis-server",
        ("server", "io_threads_active"): "0",
        ("memory", "used_memory"): str(int(2e6 + rng.uniform(0, 5e5))),
        ("memory", "used_memory_rss"): str(int(9e6 + rng.uniform(0, 1e6))),
        ("memory", "used_memory_peak"): str(int(3e6)),
        ("memory", "maxmemory"): "0",
        ("memory", "maxmemory_policy"): "noeviction",
        ("memory", "mem_fragmentation_ratio"): f"{rng.uniform(3, 5):.2f}",
        ("memory", "mem_allocator"): "jemalloc-5.3.0",
        ("persistence", "loading"): "0",
        ("persistence", "rdb_changes_since_last_save"): str(rng.randint(0, 1000)),
        ("persistence", "aof_enabled"): "0",
        ("clients", "connected_clients"): str(rng.randint(2, 40)),
        ("clients", "blocked_clients"): "0",
        ("keyspace", "db0"): f"keys={rng.randint(1000, 9000)},expires=0,avg_ttl=0",
        ("config", "slowlog-log-slower-than"): "10000",
        ("config", "slowlog-max-len"): "128",
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
        ("probe", "url"): f"redis://10.0.0.{env.index}:6379/0",
        ("probe", "same_server_as"): "",
        ("prober", "hostname"): f"host-{env.index:02d}",
        ("prober", "os"): "Linux 6.1.0-27-amd64 x86_64",
        ("prober", "cores"): str(env.cores),
        ("prober", "cpu_model"): env.cpu_model,
        ("prober", "load_1m"): f"{load_1m:.2f}",
        ("prober", "load_5m"): f"{load_1m * 0.9:.2f}",
        ("prober", "load_15m"): f"{load_1m * 0.8:.2f}",
        ("prober", "python"): "3.11.2",
        ("prober", "redis_py"): "5.2.1",
        ("prober", "tool_version"): "0.1.0",
    }
    tables["fingerprint"] = [
        {"section": s, "key": k, "value": v} for (s, k), v in fingerprint.items()
    ]

    windows, histogram, counters, percentiles = [], [], [], []
    # Cumulative counters since the server started: the probe's PINGs add to them.
    calls = {c: 1000 + (night - started_night) * rng.randint(500, 5000) for c in COMMANDS}
    usec_per_call = {c: (server_us if c == "ping" else rng.uniform(1, 30)) for c in COMMANDS}
    for w in range(WINDOWS):
        t0 = at + timedelta(seconds=10 + 1.2 * w)
        samples = int(1e6 / (rtt_median_us + 1000))  # 1 s window, 1 ms interval
        rows, lo, hi, mean = _histogram(rng, w, rtt_median_us, samples)
        samples = sum(r["count"] for r in rows)
        histogram += rows
        windows.append(
            {
                "window_idx": w,
                "started_at": t0,
                "window_s": 1.0,
                "interval_ms": 1.0,
                "samples": samples,
                "rtt_min_us": lo,
                "rtt_max_us": hi,
                "rtt_mean_us": mean,
                "host_busy_share": rng.uniform(0.05, 0.4),
            }
        )
        for phase in ("before", "after"):
            if phase == "after":
                calls["ping"] += samples
                for c in COMMANDS[1:]:
                    calls[c] += rng.randint(0, 50)
            counters += [
                {
                    "window_idx": w,
                    "phase": phase,
                    "taken_at": t0,
                    "command": c,
                    "calls": calls[c],
                    "usec": int(calls[c] * usec_per_call[c]),
                    "rejected_calls": 0,
                    "failed_calls": 0,
                }
                for c in COMMANDS
            ]
        percentiles += [
            {
                "window_idx": w,
                "taken_at": t0,
                "command": c,
                "percentile": p,
                "latency_us": usec_per_call[c] * m,
            }
            for c in COMMANDS
            for p, m in ((50.0, 1.0), (99.0, 2.5), (99.9, 6.0))
        ]
    tables["ping_windows"] = windows
    tables["ping_histogram"] = histogram
    tables["commandstats"] = counters
    tables["latencystats"] = percentiles
    tables["commandstats_snapshots"] = [
        {
            "server_run_id": server_run_id,
            "uptime_s": uptime_s + 20,
            "taken_at": at,
            "command": c,
            "calls": calls[c],
            "usec": int(calls[c] * usec_per_call[c]),
            "rejected_calls": 0,
            "failed_calls": 0,
        }
        for c in COMMANDS
    ]
    # SLOWLOG: six application entries a night, ids contiguous within one server run (the
    # queue of 128 never overflows: no losses).
    entries = 6
    first_id = (night - started_night) * 6
    tables["slowlog_collections"] = [
        {
            "server_run_id": server_run_id,
            "redis_version": version,
            "uptime_s": uptime_s,
            "collected_at": at + timedelta(seconds=20),
            "slowlog_len": entries,
            "slowlog_max_len": 128,
            "log_slower_than_us": 10_000,
            "count_requested": -1,
            "entries_returned": entries,
            "args_redacted": True,
            "tool_client_prefix": "yardstick:",
            "read_s": 0.002,
        }
    ]
    tables["slowlog_entries"] = [
        {
            "server_run_id": server_run_id,
            "entry_id": first_id + i,
            "logged_at": at - timedelta(hours=rng.uniform(0, 23)),
            "duration_us": rng.randint(10_000, 80_000),
            "command": "keys",
            "args": ["keys", "<1 bytes>"],
            "args_redacted": True,
            "arg_count": 2,
            "arg_count_original": None,
            "complexity": None,
            "client_addr": "10.0.1.5:53422",
            "client_name": "app",
            "entry_fields": 6,
        }
        for i in range(entries)
    ]
    tables["latency_collections"] = [
        {
            "server_run_id": server_run_id,
            "collected_at": at + timedelta(seconds=21),
            "threshold_ms": 0,
            "events": 0,
            "doctor_text": "monitor off",
            "error": None,
        }
    ]
    if "intrinsic" in families:
        avg_ns = 30 * version_gain * (1 + rng.gauss(0, 0.02))
        max_us = rng.uniform(30, 400)
        tables["intrinsic"] = [
            {
                "started_at": at + timedelta(seconds=3),
                "duration_s": 1.0,
                "max_us": max_us,
                "max_updates": rng.randint(3, 12),
                "total_runs": int(1e9 / avg_ns),
                "avg_us_per_run": avg_ns / 1000,
                "avg_ns_per_run": avg_ns,
                "worst_over_avg_printed": max_us * 1000 / avg_ns,
                "host_busy_share": 0.3,
                "load_1m_before": load_1m,
                "tool_path": "/usr/bin/redis-cli",
                "tool_version": version,
            }
        ]
    if "throughput" in families:
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
                                {
                                    "repetition": rep,
                                    "clients": clients,
                                    "pipeline": pipeline,
                                    "payload_bytes": payload,
                                    "requests": 5000,
                                    "test": test,
                                    "status": "ok",
                                    "error": None,
                                    "rps": rps,
                                    "avg_ms": p50_ms * 1.1,
                                    "min_ms": p50_ms * 0.3,
                                    "p50_ms": p50_ms,
                                    "p95_ms": p50_ms * 2,
                                    "p99_ms": p50_ms * 3,
                                    "max_ms": p50_ms * 10,
                                    "started_at": at + timedelta(seconds=30),
                                    "elapsed_s": 5000 / rps,
                                    "host_busy_share": 0.9,
                                    "tool_version": version,
                                }
                            )
        tables["benchmark"] = rows
    duration_s = 60.0
    tables["steps"] = [
        {
            "family": f,
            "status": "ok",
            "reason": None,
            "started_at": at,
            "finished_at": at + timedelta(seconds=5),
            "duration_s": 5.0,
            "window_s": 5.0 if f == "round_trip" else None,
        }
        for f in families
    ]
    tables["runs"] = [
        {
            "profile": "nightly",
            "started_at": at,
            "finished_at": at + timedelta(seconds=duration_s),
            "duration_s": duration_s,
            "status": "ok",
            "error": None,
            "mode": env.mode,
            "transport": env.transport,
            "url": f"redis://10.0.0.{env.index}:6379/0",
            "host_group": f"host-{env.index:02d}",
            "same_server_as": None,
            "prober_on_host": env.prober_on_host,
            "tool_version": "0.1.0",
        }
    ]
    return tables


def _generate_env(lake_dir: str, index: int, days: int) -> int:
    """Land every night of one environment, then mark it done; the number of files written."""
    env, files = EnvProfile(index), 0
    for night in range(days):
        run_id = night_run_id(night)
        for table, rows in run_tables(env, night).items():
            lake.write(lake_dir, table, env.name, run_id, to_table(table, rows))
            files += 1
    _mark(Path(lake_dir) / f".{env.name}{COMPLETE}")
    return files


def _mark(path: Path) -> None:
    """Mark a lake or one environment of it as finished by this generator."""
    path.write_text(f"generator {GENERATOR}\n")


def _marked(path: Path) -> bool:
    """Whether this mark exists and was written by this generator."""
    return path.exists() and path.read_text() == f"generator {GENERATOR}\n"


def _size(path: Path) -> tuple[int, int]:
    """(days, envs) of a cached lake, from its name."""
    days, envs = path.name.removeprefix("yardstick-bench-lake-").split("x")
    return int(days), int(envs)


def _env_done(lake_dir: Path, index: int) -> bool:
    """Whether every night of environment `index` is in this lake."""
    if _marked(lake_dir / f".{env_name(index)}{COMPLETE}"):
        return True
    return _marked(lake_dir / COMPLETE) and index < _size(lake_dir)[1]


def _link_env(source: Path, target: Path, index: int, days: int) -> None:
    """Hard-link the first `days` nights of one environment from a longer lake."""
    last_day = (FIRST_NIGHT + timedelta(days=days - 1)).date().isoformat()
    for path in source.glob(f"*/env={env_name(index)}/date=*/*.parquet"):
        if path.parent.name.removeprefix("date=") <= last_day:
            link = target / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, link)
    _mark(target / f".{env_name(index)}{COMPLETE}")


def ensure_lake(root: Path, days: int, envs: int, workers: int) -> Path:
    """The cached lake of `days` x `envs`: reused, or built environment by environment, each
    linked from a lake holding at least as many of its nights or else generated."""
    target = lake_path(root, days, envs)
    if _marked(target / COMPLETE):
        return target
    start = time.perf_counter()
    # Nights are generated alike whatever the lake: a shorter one is a prefix of a longer one.
    sources = sorted(
        (p for p in root.glob("yardstick-bench-lake-*x*") if p != target and _size(p)[0] >= days),
        key=lambda p: _size(p)[0],
    )
    linked, todo = 0, []
    for index in range(envs):
        if _marked(target / f".{env_name(index)}{COMPLETE}"):
            continue
        # A half-generated environment is started again: the lake never overwrites.
        for partial in target.glob(f"*/env={env_name(index)}"):
            shutil.rmtree(partial)
        source = next((p for p in sources if _env_done(p, index)), None)
        if source is None:
            todo.append(index)
        else:
            _link_env(source, target, index, days)
            linked += 1
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_generate_env, str(target), i, days) for i in todo]
        for done, future in enumerate(futures, 1):
            future.result()
            print(
                f"  generated {done}/{len(todo)} environments "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    _mark(target / COMPLETE)
    print(
        f"lake {target}: {len(todo)} environments generated, {linked} linked, "
        f"{envs - len(todo) - linked} reused, in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    return target


def lake_stats(lake_dir: Path) -> tuple[int, int, dict[str, int]]:
    """Files, bytes and files per table of a lake."""
    files, size, per_table = 0, 0, defaultdict(int)
    for path in lake_dir.glob("*/env=*/date=*/*.parquet"):
        files += 1
        size += path.stat().st_size
        per_table[path.parts[-4]] += 1
    return files, size, dict(per_table)


def _load_compacted(con: duckdb.DuckDBPyConnection, compact: Path, table: str) -> None:
    """raw_<table> as warehouse._load_raw makes it, from one compacted file per table."""
    empty = file_schema(table).empty_table()  # noqa: F841 - read by DuckDB's replacement scan
    con.execute(
        f"create table raw_{table} as select *, null::varchar as env, null::date as date from empty"
    )
    if (compact / f"{table}.parquet").exists():
        con.execute(
            f"insert into raw_{table} by name "
            f"select * from read_parquet('{compact / table}.parquet')"
        )


def timed_build(
    lake_dir: Path, path: Path, compact: Path | None = None, threads: int = 1
) -> list[tuple[str, float]]:
    """The steps of warehouse.build, one by one, with the wall time of each (seconds); raw
    tables from the lake as it does, or from compacted files."""
    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path), config={"threads": threads})  # 1: as warehouse.build
    timings = []
    try:
        for table in TABLES:
            start = time.perf_counter()
            if compact is None:
                warehouse._load_raw(con, lake_dir, table)  # noqa: SLF001 - timing its pieces
            else:
                _load_compacted(con, compact, table)
            timings.append((f"load raw_{table}", time.perf_counter() - start))
        for name, text in warehouse.sql_files():
            for statement in con.extract_statements(text):
                # The statement's first words, its comments left out, name it in the output.
                words = re.sub(r"/\*.*?\*/|--[^\n]*", " ", statement.query, flags=re.S).split()
                label = " ".join(words[:6])
                start = time.perf_counter()
                con.execute(statement)
                timings.append((f"sql/{name}: {label}", time.perf_counter() - start))
        start = time.perf_counter()
        con.execute("checkpoint")
        timings.append(("checkpoint", time.perf_counter() - start))
    finally:
        con.close()
    return timings


def what_if_reads(lake_dir: Path, work: Path) -> list[tuple[str, float]]:
    """Read the same raw rows three ways: as built (one file per run), without
    union_by_name, and from a compacted lake (one file per table)."""
    con = duckdb.connect(config={"threads": 1})
    compact = work / "compact"
    shutil.rmtree(compact, ignore_errors=True)
    compact.mkdir(parents=True)
    results = []
    for options, label in (
        ("union_by_name = true", "per-run files, union_by_name (as built)"),
        ("union_by_name = false", "per-run files, no union_by_name"),
    ):
        start = time.perf_counter()
        for table in TABLES:
            pattern = lake_dir / table / "env=*" / "date=*" / "*.parquet"
            if any((lake_dir / table).glob("env=*/date=*/*.parquet")):
                con.execute(
                    f"create or replace table t_{table} as select * from read_parquet("
                    f"'{pattern}', hive_partitioning = true, {options})"
                )
        results.append((label, time.perf_counter() - start))
    for table in TABLES:
        if con.execute(
            "select count(*) from duckdb_tables() where table_name = ?", [f"t_{table}"]
        ).fetchone()[0]:
            con.execute(f"copy t_{table} to '{compact / table}.parquet' (compression zstd)")
    start = time.perf_counter()
    for table in TABLES:
        if (compact / f"{table}.parquet").exists():
            con.execute(
                f"create or replace table c_{table} as select * from "
                f"read_parquet('{compact / table}.parquet')"
            )
    results.append(("compacted: one file per table", time.perf_counter() - start))
    con.close()
    return results


def median_s(fn, repeat: int) -> float:
    """Median wall time of `repeat` calls (seconds)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def report_times(wh: Path, work: Path, env: str) -> dict[str, float]:
    """Render times: the whole night's reports, and one environment's alone."""
    from yardstick.charts import render_charts
    from yardstick.reports.render import (
        _jinja,
        environment_context,
        render_reports,
        section_templates,
    )

    con = warehouse.connect_read_only(wh)
    run_id = con.execute(
        "select run_id from stg_runs where env = ? order by started_at desc limit 1", [env]
    ).fetchone()[0]
    runs_in_night = con.execute(
        "select count(*) from stg_runs where run_id = ?", [run_id]
    ).fetchone()[0]
    cursor = con.execute("select * from stg_runs where run_id = ? and env = ?", [run_id, env])
    run = dict(zip([d[0] for d in cursor.description], cursor.fetchone(), strict=True))
    jinja = _jinja()
    template, sections = jinja.get_template("environment.md.j2"), section_templates(jinja)
    out = work / "reports"
    times: dict[str, float] = {}
    # Warm-up: templates compiled, matplotlib's fonts loaded, as in a long-running flow.
    render_charts(con, out, run)
    times["context_s"] = median_s(lambda: environment_context(con, run), 5)
    times["charts_s"] = median_s(lambda: render_charts(con, out, run), 5)
    context = environment_context(con, run)
    context["charts"] = render_charts(con, out, run)
    times["template_s"] = median_s(lambda: template.render(**context, sections=sections), 5)
    con.close()
    start = time.perf_counter()
    render_reports(wh, out, run_id)
    times["night_s"] = time.perf_counter() - start
    times["night_envs"] = runs_in_night
    return times


def main() -> None:
    """Generate or reuse the lakes, build, query, render, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--envs", type=int, default=50)
    parser.add_argument("--lake-root", type=Path, default=Path("/tmp"))
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the warehouses and reports go (removed at the end)",
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-double", action="store_true", help="skip the 2x-days lake")
    parser.add_argument("--no-breakdown", action="store_true", help="skip per-step timings")
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="time raw reads without union_by_name and from a compacted lake",
    )
    args = parser.parse_args()
    sizes = [args.days] if args.no_double else [args.days * 2, args.days]
    lakes = {days: ensure_lake(args.lake_root, days, args.envs, args.workers) for days in sizes}
    args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="yardstick-bench-retention-", dir=args.work))
    # The machine before the numbers: other load on it inflates every time below.
    load_1m, load_5m, _ = os.getloadavg()
    print(
        f"\n{os.cpu_count()} cores, load average {load_1m:.2f} / {load_5m:.2f} (1/5 min), "
        f"duckdb {duckdb.__version__}"
    )
    builds: dict[int, float] = {}
    print(f"\n{'lake':>12} {'files':>9} {'size MiB':>9} {'runs':>7} {'build s':>8}")
    for days in sorted(lakes):
        files, size, _per_table = lake_stats(lakes[days])
        start = time.perf_counter()
        warehouse.build(lakes[days], work / f"w{days}.duckdb")
        builds[days] = time.perf_counter() - start
        print(
            f"{days:>5}x{args.envs:<6} {files:>9,} {size / 2**20:>9.1f} "
            f"{days * args.envs:>7,} {builds[days]:>8.2f}",
            flush=True,
        )
    year = args.days
    verdict = "meets" if builds[year] <= BUILD_TARGET_S else "misses"
    print(
        f"\nbuild {year} nights x {args.envs}: {builds[year]:.2f} s "
        f"(target <= {BUILD_TARGET_S:.0f} s: {verdict})"
    )
    if 2 * year in builds:
        ratio = builds[2 * year] / builds[year]
        verdict = "meets" if ratio <= RATIO_TARGET else "misses"
        print(
            f"build {2 * year} / {year} nights: {ratio:.2f}x (target <= {RATIO_TARGET}x: {verdict})"
        )

    wh = work / f"w{year}.duckdb"
    con = warehouse.connect_read_only(wh)
    env = env_name(0)
    points = len(con.execute(TREND_SQL, [env]).fetchall())
    trend_ms = 1000 * median_s(lambda: con.execute(TREND_SQL, [env]).fetchall(), 20)
    verdict = "meets" if trend_ms <= TREND_TARGET_MS else "misses"
    print(
        f"trend query ({env}, rtt_client_p99_us, {points} points): median of 20 "
        f"{trend_ms:.1f} ms (target <= {TREND_TARGET_MS:.0f} ms: {verdict})"
    )
    cp_ms = 1000 * median_s(lambda: series_change_points(con, env, "rtt_client_p99_us"), 5)
    found = series_change_points(con, env, "rtt_client_p99_us")
    print(
        f"series_change_points on that series: median of 5 {cp_ms:.1f} ms, "
        f"{len(found)} change points: "
        + ", ".join(f"{p.started_at:%Y-%m-%d} {p.change_share:+.0%}" for p in found)
    )
    con.close()
    times = report_times(wh, work, env)
    print(
        f"report of {env}: context {1000 * times['context_s']:.0f} ms + charts "
        f"{1000 * times['charts_s']:.0f} ms + template {1000 * times['template_s']:.0f} ms; "
        f"render_reports of its night ({times['night_envs']:.0f} environments, comparison "
        f"and index included): {times['night_s']:.2f} s"
    )

    if not args.no_breakdown:
        print(f"\nwhere the {year}-night build goes (threads=1, as warehouse.build):")
        timings = timed_build(lakes[year], work / "breakdown.duckdb")
        total = sum(t for _, t in timings)
        raw = sum(t for label, t in timings if label.startswith("load raw_"))
        print(f"  total {total:.2f} s: raw loads {raw:.2f} s, SQL models {total - raw:.2f} s")
        for label, seconds in sorted(timings, key=lambda x: -x[1])[:15]:
            print(f"  {seconds:8.2f} s  {100 * seconds / total:5.1f} %  {label}")
        if 2 * year in lakes:
            double = timed_build(lakes[2 * year], work / "breakdown2.duckdb")
            print(f"\nsame steps at {2 * year} nights (ratio to {year}):")
            base = dict(timings)
            for label, seconds in sorted(double, key=lambda x: -x[1])[:10]:
                print(f"  {seconds:8.2f} s  {seconds / max(base[label], 1e-9):5.2f}x  {label}")
    if args.what_if:
        print(f"\nraw reads of the {year}-night lake, three ways (threads=1):")
        for label, seconds in what_if_reads(lakes[year], work):
            print(f"  {seconds:8.2f} s  {label}")
        # The whole build again, raw tables from those compacted files: what is left is SQL.
        for threads in sorted({1, os.cpu_count() or 1}):
            timings = timed_build(lakes[year], work / "compacted.duckdb", work / "compact", threads)
            total = sum(t for _, t in timings)
            raw = sum(t for label, t in timings if label.startswith("load raw_"))
            print(
                f"\nbuild from compacted raw files, threads={threads}: {total:.2f} s "
                f"(raw loads {raw:.2f} s, SQL models {total - raw:.2f} s); slowest:"
            )
            for label, seconds in sorted(timings, key=lambda x: -x[1])[:5]:
                print(f"  {seconds:8.2f} s  {label}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
