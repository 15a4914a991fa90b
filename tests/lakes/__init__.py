"""Synthetic lakes for the tests: runs of environments landed in the real lake format (the
files the flows write, through delta.write and the declared schemas), from hand-made rows, as
dbt unit tests give `given` rows to a model.

Compose a run from small pieces; each lands one table (or a family's tables) of that run:

    run = new_run(lake_dir, "env-a", at)            # run id from `at` (delta.new_run_id)
    runs_row(run, profile="nightly")                # the row that makes the run complete
    steps(run, {"round_trip": digest("nightly", "round_trip"), "throughput": None})
    fingerprint(run, "7.2.4", product=("valkey", "8.1.8"))
    ping(run, rtt_us=60.0, rng=random.Random(7))    # ping_windows, ping_histogram, commandstats
    benchmark(run, [cell("SET", 1, 1, 1e5), cell("SET", 1, 16, 1e6)])

and `memtier`, `intrinsic`, `latencystats`, `commandstats_snapshot` (the counters family, in
collections too), `slowlog_collection`, `transport`, and `recorded` (the tables one real run
of some families landed, replayed at another time: tests/samples/recorded_families.json). A
piece lands exactly the rows it is given or says it builds; nothing is random unless an `rng`
is passed (seed it). Without `runs_row` a run is one killed before it could land its run row
(the warehouse lists it as crashed).

Imported by the tests as `from lakes import ...` (tests/ is on sys.path, as for conftest) and
by the benches (bench/_harness.py puts tests/ there). Its module `lakes.schedule` generates
whole schedules at scale (50 environments, a year of nights and collections shaped by a real
run) for bench/retention.py, bench/lake_files.py and bench/landing.py.
"""

from __future__ import annotations

import hashlib
import math
import random
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from yardstick.storage import delta
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table


@dataclass(frozen=True)
class Run:
    """One run of one environment: where it lands, its id and when it started."""

    lake_dir: Path
    env: str
    run_id: str
    at: datetime

    def write(self, table: str, rows: list[dict]) -> None:
        """Land `rows` as this run's file of `table` (no file for no rows, as delta.write)."""
        delta.write(Lake.at(self.lake_dir), table, self.env, self.run_id, to_table(table, rows))


def stable_run_id(at: datetime, env: str) -> str:
    """A run id sortable by time and the same on every call (delta.new_run_id's format, its
    random suffix replaced by one taken from the environment's name)."""
    return f"{at:%Y%m%dT%H%M%SZ}-{zlib.crc32(env.encode()) % 0xFFFFFF:06x}"


def new_run(lake_dir: Path, env: str, at: datetime, run_id: str | None = None) -> Run:
    """A run of `env` started `at`; its id is `run_id`, else delta.new_run_id(at) (random
    suffix: use stable_run_id for ids that must not change)."""
    return Run(Path(lake_dir), env, run_id or delta.new_run_id(at), at)


def digest(profile: str, family: str = "") -> str:
    """A params digest standing for `profile`'s settings of `family` (12 hex digits, as
    Profile digests are): the same profile and family give the same digest."""
    return hashlib.sha256(f"{profile}/{family}".encode()).hexdigest()[:12]


def runs_row(
    run: Run, profile: str = "nightly", status: str = "ok", *, duration_s: float = 1.0, **fields
) -> None:
    """The run's `runs` row: a scratch run over a direct connection, prober on the host,
    finished `duration_s` after it started; `fields` set (or, as None, clear) any column."""
    row = {
        "profile": profile,
        "started_at": run.at,
        "finished_at": run.at + timedelta(seconds=duration_s),
        "duration_s": duration_s,
        "status": status,
        "mode": "scratch",
        "transport": "direct",
        "url": "redis://127.0.0.1:6379/0",
        "prober_on_host": True,
    }
    run.write("runs", [{**row, **fields}])


def steps(run: Run, families: Mapping[str, str | None] | Iterable[str], **fields) -> None:
    """One `steps` row per family, status ok, started with the run; a mapping gives each
    family's params digest (None: none, as runs landed before digests were kept)."""
    if not isinstance(families, Mapping):
        families = dict.fromkeys(families)
    run.write(
        "steps",
        [
            {
                "family": family,
                "status": "ok",
                "started_at": run.at,
                "params_digest": params,
                **fields,
            }
            for family, params in families.items()
        ],
    )


def fingerprint(
    run: Run,
    redis_version: str = "7.0.15",
    *,
    cores: int | str = 2,
    product: tuple[str, str] | None = None,
    transport: str = "direct",
    prober_on_host: bool = True,
    facts: Mapping[tuple[str, str], str] | None = None,
) -> None:
    """The run's fingerprint: INFO's redis_version, the probe's transport and place, the
    prober's cores; `product` = (name, version) for a server that is not Redis (Valkey 8.1.8
    answers redis_version 7.2.4); `facts` adds or replaces any (section, key)."""
    rows = {
        ("server", "redis_version"): redis_version,
        ("probe", "transport"): transport,
        ("probe", "prober_on_host"): "true" if prober_on_host else "false",
        ("prober", "cores"): str(cores),
    }
    if product is not None:
        rows[("product", "name")], rows[("product", "version")] = product
    rows.update(facts or {})
    run.write("fingerprint", [{"section": s, "key": k, "value": v} for (s, k), v in rows.items()])


def cell(test: str, clients: int, pipeline: int, rps: float, **fields) -> dict:
    """One redis-benchmark row (one cell, one repetition), status ok; `fields` override the
    defaults (repetition 0, 3-byte payloads, 1000 requests, p50 0.02 ms, p99 0.05 ms)."""
    return {
        "repetition": 0,
        "clients": clients,
        "pipeline": pipeline,
        "payload_bytes": 3,
        "requests": 1000,
        "test": test,
        "status": "ok",
        "rps": rps,
        "p50_ms": 0.02,
        "p99_ms": 0.05,
        **fields,
    }


def transport_side(rnd: int, side: str, rps: float | None, rtt_us: float, **fields) -> dict:
    """One side (direct or forwarded) of one transport round: 100 RTT samples whose minimum is
    half their mean, and redis-benchmark's requests per second (None: no result)."""
    return {
        "round": rnd,
        "side": side,
        "env_measured": side,
        "samples": 100,
        "rtt_mean_us": rtt_us,
        "rtt_min_us": rtt_us / 2,
        "rps": rps,
        **fields,
    }


def benchmark(run: Run, cells: Iterable[dict]) -> None:
    """The throughput family's table: rows made by `cell`."""
    run.write("benchmark", list(cells))


def ping(
    run: Run,
    *,
    rtt_us: float,
    rng: random.Random,
    windows: int = 5,
    samples: int = 2000,
    server_usec_per_ping: float = 1.5,
    first_calls: int = 1000,
    busy_share: float = 0.2,
) -> None:
    """The round-trip family's tables: `windows` one-second PING windows of `samples` each,
    mean within ±1 % of `rtt_us` (one rng.uniform per window), a log-normal-ish histogram on
    the probe's 2 % buckets around it, and commandstats before and after each window (the
    server spending `server_usec_per_ping` per PING, 3 other PINGs between windows)."""
    rows, histogram, counters = [], [], []
    calls = first_calls
    for w in range(windows):
        mean_us = rtt_us * (1 + rng.uniform(-0.01, 0.01))
        rows.append(
            {
                "window_idx": w,
                "started_at": run.at + timedelta(seconds=w),
                "window_s": 1.0,
                "interval_ms": 0.0,
                "samples": samples,
                "rtt_min_us": mean_us * 0.6,
                "rtt_max_us": mean_us * 8,
                "rtt_mean_us": mean_us,
                "host_busy_share": busy_share,
            }
        )
        centre = math.floor(math.log(mean_us) / math.log(1.02))
        for bucket in range(centre - 25, centre + 60):
            count = round(samples * 0.08 * math.exp(-(((bucket - centre) / 9) ** 2)))
            if count:
                histogram.append(
                    {
                        "window_idx": w,
                        "bucket": bucket,
                        "low_us": 1.02**bucket,
                        "high_us": 1.02 ** (bucket + 1),
                        "count": count,
                    }
                )
        for phase, n in (("before", calls), ("after", calls + samples)):
            counters.append(
                {
                    "window_idx": w,
                    "phase": phase,
                    "taken_at": run.at,
                    "command": "ping",
                    "calls": n,
                    "usec": round(n * server_usec_per_ping),
                    "rejected_calls": 0,
                    "failed_calls": 0,
                }
            )
        calls += samples + 3
    run.write("ping_windows", rows)
    run.write("ping_histogram", histogram)
    run.write("commandstats", counters)


def latencystats(run: Run, percentiles_us: Mapping[float, float], windows: int = 5) -> None:
    """INFO latencystats for PING after each window (cumulative: the same each time)."""
    run.write(
        "latencystats",
        [
            {
                "window_idx": w,
                "taken_at": run.at + timedelta(seconds=w + 1),
                "command": "ping",
                "percentile": p,
                "latency_us": us,
            }
            for w in range(windows)
            for p, us in percentiles_us.items()
        ],
    )


def memtier(
    run: Run,
    repetitions: Iterable[Mapping[str, float]],
    *,
    hit_share: float = 0.5,
    elapsed_s: float = 10.0,
) -> None:
    """memtier_benchmark's rows: per repetition (started 20 s apart), one row per op type
    with its ops/s (e.g. {"sets": 1e4, "gets": 9e4, "totals": 1e5}); latencies scale with
    1 / ops/s, GET hits are `hit_share` of gets."""
    rows = []
    for rep, ops in enumerate(repetitions):
        for op, ops_sec in ops.items():
            hits = ops_sec * hit_share if op == "gets" else 0.0
            rows.append(
                {
                    "op_type": op,
                    "count": ops_sec * elapsed_s,
                    "ops_sec": ops_sec,
                    "hits_sec": hits,
                    "misses_sec": ops_sec - hits if op == "gets" else 0.0,
                    "avg_ms": 1e3 / ops_sec,
                    "p50_ms": 0.9e3 / ops_sec,
                    "p99_ms": 3e3 / ops_sec,
                    "p999_ms": 8e3 / ops_sec,
                    "ratio": "1:10",
                    "threads": 1,
                    "clients_per_thread": 10,
                    "data_size_bytes": 32,
                    "started_at": run.at + timedelta(seconds=20 * rep),
                    "elapsed_s": elapsed_s,
                }
            )
    run.write("memtier", rows)


def intrinsic(
    run: Run, *, max_us: float, avg_ns_per_run: float, total_runs: int = 10_000_000
) -> None:
    """One redis-cli --intrinsic-latency run on the server host."""
    run.write(
        "intrinsic",
        [
            {
                "started_at": run.at,
                "duration_s": 5.0,
                "max_us": max_us,
                "max_updates": 3,
                "total_runs": total_runs,
                "avg_us_per_run": avg_ns_per_run / 1e3,
                "avg_ns_per_run": avg_ns_per_run,
                "host_busy_share": 0.1,
            }
        ],
    )


def commandstats_snapshot(
    run: Run,
    calls: Mapping[str, int],
    *,
    server_run_id: str = "srv-a",
    uptime_s: int = 1000,
    usec_per_call: float = 3.0,
) -> None:
    """INFO commandstats once (the counters family; collections take one too): cumulative
    `calls` per command, each costing `usec_per_call`."""
    run.write(
        "commandstats_snapshots",
        [
            {
                "server_run_id": server_run_id,
                "uptime_s": uptime_s,
                "taken_at": run.at,
                "command": command,
                "calls": n,
                "usec": round(n * usec_per_call),
                "rejected_calls": 0,
                "failed_calls": 0,
            }
            for command, n in calls.items()
        ],
    )


def slowlog_collection(
    run: Run,
    ids: Iterable[int],
    *,
    server_run_id: str = "srv-a",
    max_len: int = 128,
    redis_version: str = "7.0.15",
    duration_us: int = 20_000,
) -> None:
    """One SLOWLOG read that returned entries `ids` (odd ids from the tool's own
    connection, even ones from the application)."""
    ids = list(ids)
    run.write(
        "slowlog_collections",
        [
            {
                "server_run_id": server_run_id,
                "redis_version": redis_version,
                "uptime_s": 100,
                "collected_at": run.at,
                "slowlog_len": len(ids),
                "slowlog_max_len": max_len,
                "log_slower_than_us": 10000,
                "count_requested": -1,
                "entries_returned": len(ids),
                "args_redacted": True,
                "tool_client_prefix": "yardstick",
                "read_s": 0.001,
            }
        ],
    )
    run.write(
        "slowlog_entries",
        [
            {
                "server_run_id": server_run_id,
                "entry_id": i,
                "logged_at": run.at - timedelta(seconds=len(ids) - n),
                "duration_us": duration_us,
                "command": "keys",
                "args": ["KEYS", "*"],
                "args_redacted": True,
                "arg_count": 2,
                "client_name": "yardstick-keyspace" if i % 2 else "app",
                "entry_fields": 6,
            }
            for n, i in enumerate(ids)
        ],
    )


def land_measured(run: Run, measured) -> None:
    """Land a family's Measured (its tables, as the tool's collectors read them) as this
    run's rows."""
    for table, rows in measured.tables.items():
        run.write(table, rows.to_pylist())


def family_load(
    run: Run, family: str, run_queues: list[int], *, busy_share: float = 0.5, cores: int = 2
) -> None:
    """Load samples through `family`, one every 0.5 s: other threads running or waiting for a
    CPU (`run_queues`, none of them the prober's own) on `cores` cores."""
    run.write(
        "family_load",
        [
            {
                "family": family,
                "sample_idx": i,
                "sampled_at": run.at + timedelta(seconds=i / 2),
                "interval_s": None if i == 0 else 0.5,
                "busy_share": None if i == 0 else busy_share,
                "run_queue": queue,
                "own_running": 0,
                "load_1m": 1.0,
                "cores": cores,
                "on_server_host": True,
            }
            for i, queue in enumerate(run_queues)
        ],
    )


def keyspace_scan(run: Run, keys: list[dict], used_memory: int) -> None:
    """A complete key space scan that read `keys` (keyspace_keys rows): its scan row and keys."""
    run.write(
        "keyspace_scans",
        [
            {
                "started_at": run.at,
                "wall_s": 1.0,
                "paused_s": 0.0,
                "stop_reason": "complete",
                "max_keys": 100_000,
                "busy_share_cap": 0.1,
                "max_wall_s": 60.0,
                "scan_count": 1000,
                "separators": ":",
                "depth": 1,
                "top_keys": 10,
                "projection_factor": 2.0,
                "db": 0,
                "dbsize_before": len(keys),
                "dbsize_after": len(keys),
                "keys_other_dbs": 0,
                "used_memory_before_bytes": used_memory,
                "used_memory_after_bytes": used_memory,
                "rounds": 1,
                "scan_calls": 1,
                "duplicates": 0,
                "vanished": 0,
                "guesses_wrong": 0,
                "errors": 0,
                "type_source": "scan",
                "encoding_every": 1,
                "encodings_read": len(keys),
            }
        ],
    )
    run.write("keyspace_keys", keys)


def transport(run: Run, rounds: Iterable[tuple[float, float, float, float]]) -> None:
    """The transport family's paired rounds: per round (direct rps, direct mean rtt µs,
    forwarded rps, forwarded mean rtt µs), 100 samples a side."""
    rows = []
    for rnd, (direct_rps, direct_rtt_us, fwd_rps, fwd_rtt_us) in enumerate(rounds):
        for side, rps, rtt_us in (
            ("direct", direct_rps, direct_rtt_us),
            ("forwarded", fwd_rps, fwd_rtt_us),
        ):
            rows.append(transport_side(rnd, side, float(rps), rtt_us))
    run.write("transport", rows)


def recorded(run: Run, tables: Mapping[str, list[dict]], recorded_at: datetime) -> None:
    """Land the rows one real run recorded (tests/samples/recorded_families.json: table ->
    rows, timestamps as {"__dt__": iso}) as this run's, every timestamp moved by the same
    offset so the run starts at `run.at` as the recording started at `recorded_at`."""
    shift = run.at - recorded_at

    def value(v):
        if isinstance(v, dict) and set(v) == {"__dt__"}:
            return datetime.fromisoformat(v["__dt__"]) + shift
        return v

    for table, rows in tables.items():
        run.write(table, [{k: value(v) for k, v in row.items()} for row in rows])


def query(warehouse_path: Path, sql: str, params: list | None = None) -> list[dict]:
    """The rows of `sql` on a built warehouse, as dicts (opened read-only, closed after)."""
    from yardstick.storage import warehouse

    con = warehouse.connect_read_only(warehouse_path)
    try:
        cursor = con.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()
