"""memtier_benchmark: a mixed SET:GET workload with hits and misses, when the tool is
installed, run `repetitions` times; its JSON report is parsed, not its console table."""

from __future__ import annotations

import functools
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from yardstick import interrupt
from yardstick.access.benchdb import (
    MEMTIER_CLUSTER_PREFIX,
    claimed_nodes,
    empty_database,
    remove_all,
    remove_cluster_load,
)
from yardstick.access.environment import Environment
from yardstick.host.hostload import busy_share, cpu_times
from yardstick.host.tool_auth import (
    ToolAuthUnavailable,
    ToolCredentials,
    leftovers_note,
    tool_credentials,
)
from yardstick.host.tool_tls import tls_args
from yardstick.host.tools import Tool, find_tool, run_tool
from yardstick.tasks import base
from yardstick.tasks.base import UTC_TS, Family, Measured, Skipped, unit_kind, utc_now
from yardstick.tasks.throughput import cluster_primaries


class MemtierProfile(BaseModel):
    """A mixed memtier_benchmark workload, when memtier_benchmark is installed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ratio: str = "1:10"  # SET:GET
    test_time_s: int = 2
    # Runs of the whole workload, each on an emptied database: the figures are their median,
    # and their spread marks a figure noisy (one run cannot: its p99 moved 2x between two
    # runs minutes apart).
    repetitions: int = Field(default=3, ge=1)
    threads: int = 2
    clients_per_thread: int = 10
    data_size_bytes: int = 32
    key_maximum: int = 10_000
    db: int = 15


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # memtier_benchmark --json-out-file: one row per op type (sets, gets, totals).
    "memtier": pa.schema(
        [
            ("op_type", pa.string()),
            ("count", pa.float64()),
            ("ops_sec", pa.float64()),
            ("hits_sec", pa.float64()),
            ("misses_sec", pa.float64()),
            ("avg_ms", pa.float64()),
            ("min_ms", pa.float64()),
            ("max_ms", pa.float64()),
            ("p50_ms", pa.float64()),
            ("p99_ms", pa.float64()),
            ("p999_ms", pa.float64()),
            ("kb_sec", pa.float64()),
            ("duration_ms", pa.float64()),
            ("ratio", pa.string()),
            ("threads", pa.int32()),
            ("clients_per_thread", pa.int32()),
            ("data_size_bytes", pa.int32()),
            ("started_at", UTC_TS),
            ("elapsed_s", pa.float64()),
            ("host_busy_share", pa.float64()),
            ("tool_version", pa.string()),
        ]
    ),
}


# memtier prints percentiles with two decimals, so 99.99 and 99.999 share the key "p99.99":
# ask only for percentiles whose keys stay distinct.
PERCENTILES = (50.0, 99.0, 99.9)
OP_TYPES = ("Sets", "Gets", "Totals")
OP_FIELDS = {
    "Count": "count",
    "Ops/sec": "ops_sec",
    "Hits/sec": "hits_sec",
    "Misses/sec": "misses_sec",
    "Average Latency": "avg_ms",
    "Min Latency": "min_ms",
    "Max Latency": "max_ms",
    "KB/sec": "kb_sec",
}


class DuplicateKey(ValueError):
    """memtier's JSON repeated a key (colliding percentile names)."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """JSON object hook: refuse silently overwritten keys."""
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(f"memtier JSON repeats key {key!r} (percentile names collide)")
        result[key] = value
    return result


def parse_memtier_json(text: str) -> tuple[dict, list[dict]]:
    """(configuration, one row per op type) from memtier_benchmark --json-out-file."""
    data = json.loads(text, object_pairs_hook=_no_duplicates)
    config = data.get("configuration", {})
    stats = data["ALL STATS"]
    duration_ms = stats.get("Runtime", {}).get("Total duration")
    rows = []
    for op_type in OP_TYPES:
        block = stats.get(op_type)
        if not block:
            continue
        row = {"op_type": op_type.lower(), "duration_ms": duration_ms}
        row.update({name: float(block[key]) for key, name in OP_FIELDS.items() if key in block})
        for key, value in block.get("Percentile Latencies", {}).items():
            if key.startswith("p"):
                row[_percentile_column(float(key[1:]))] = float(value)
        rows.append(row)
    return config, rows


def _percentile_column(percentile: float) -> str:
    """Column for a percentile: 50 -> p50_ms, 99.9 -> p999_ms."""
    return "p" + f"{percentile:g}".replace(".", "") + "_ms"


def memtier_args(
    tool: Tool,
    env: Environment,
    profile: MemtierProfile,
    out: Path,
    credentials: ToolCredentials | None = None,
    cluster: bool = False,
) -> list[str]:
    """The command line. It never holds the environment's password: only a per-run ACL
    user's (yardstick.host.tool_auth; memtier takes `--authenticate=USER:PASSWORD` on Redis 6+),
    deleted after the run. `cluster`: the whole cluster through the URL's node
    (--cluster-mode, database 0, keys under the tool's own prefix so only they are removed)."""
    where = (
        ["--cluster-mode", f"--key-prefix={MEMTIER_CLUSTER_PREFIX}"]
        if cluster
        else [f"--select-db={profile.db}"]
    )
    args = [
        tool.path,
        "-s",
        env.host,
        "-p",
        str(env.port),
        *where,
        f"--ratio={profile.ratio}",
        f"--test-time={profile.test_time_s}",
        "-t",
        str(profile.threads),
        "-c",
        str(profile.clients_per_thread),
        "-d",
        str(profile.data_size_bytes),
        f"--key-maximum={profile.key_maximum}",
        "--hide-histogram",
        f"--json-out-file={out}",
        "--print-percentiles=" + ",".join(f"{p:g}" for p in PERCENTILES),
    ]
    if credentials is not None and credentials.user is not None:
        args.append(f"--authenticate={credentials.user}:{credentials.password}")
    return args + tls_args(env, "memtier_benchmark")


def memtier(
    env: Environment, profile: MemtierProfile, primaries: list[Environment] | None = None
) -> Measured:
    """`profile.repetitions` memtier_benchmark runs on a dedicated empty database, emptied
    before each run (every run starts from the same state, so the GET hit share and the
    latencies compare) and removed afterwards.

    A run's rows share its `started_at`: the warehouse numbers the runs by it (window_idx),
    so each figure gets n, median and spread like the throughput cells.

    `primaries`: a cluster as a whole (--cluster-mode through its seed): every primary is
    claimed, and only the keys under the tool's memtier prefix are removed from it."""
    tool = find_tool("memtier_benchmark")
    if tool is None:
        raise RuntimeError("memtier_benchmark not installed")
    cluster = unit_kind(env) == "cluster"
    if cluster and not primaries:
        raise Skipped("the cluster's primaries are not known (no topology this run)")
    rows: list[dict] = []
    window_s = 0.0
    progress = base.progress()
    progress.plan(profile.repetitions, "repetitions")
    notes: list[str] = []  # what an interrupted run left in the database, if anything
    credentials: ToolCredentials | None = None

    def finished(count: int, window_s: float) -> Measured:
        """The Measured of the first `count` rows: whole runs only."""
        return _measured(rows[:count], window_s, notes, credentials)

    with ExitStack() as stack:
        try:
            # In cluster mode the tool authenticates on every primary: the user is on each.
            credentials = stack.enter_context(
                tool_credentials(env, "memtier", also_on=primaries or ())
            )
        except ToolAuthUnavailable as exc:
            raise Skipped(str(exc)) from None
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="yardstick-memtier-"))
        if cluster:
            clients = stack.enter_context(claimed_nodes(primaries or [], "memtier", notes))
        else:
            clients = [stack.enter_context(empty_database(env, profile.db, "memtier", notes))]
        longest_s = float(profile.test_time_s)  # a run lasts its test time, and a little
        for repetition in range(profile.repetitions):
            interrupt.check()
            # A run starts only when it can finish within the family's bound.
            if not interrupt.fits(longest_s):
                progress.skip("run", interrupt.wont_fit())
                continue
            if repetition:
                # The previous run's keys (not the claim): the tool's own.
                for client in clients:
                    if cluster:
                        remove_cluster_load(client)
                    else:
                        remove_all(client)
            out = Path(tmp) / f"memtier-{repetition}.json"
            started_at, cpu_before, start = utc_now(), cpu_times(), time.perf_counter()
            run_tool(
                memtier_args(tool, env, profile, out, credentials, cluster=cluster),
                timeout_s=profile.test_time_s + 60,
            )
            elapsed_s = time.perf_counter() - start
            window_s += elapsed_s
            longest_s = max(longest_s, elapsed_s)
            config, parsed = parse_memtier_json(out.read_text())
            common = {
                "started_at": started_at,
                "elapsed_s": elapsed_s,
                "host_busy_share": busy_share(cpu_before, cpu_times()),
                "ratio": str(config.get("ratio", profile.ratio)),
                "threads": int(config.get("threads", profile.threads)),
                "clients_per_thread": int(config.get("clients", profile.clients_per_thread)),
                "data_size_bytes": int(config.get("data_size", profile.data_size_bytes)),
                "tool_version": tool.version_text,
            }
            rows += [{**common, **row} for row in parsed]
            progress.finished(functools.partial(finished, len(rows), window_s))
    return _measured(rows, window_s, notes, credentials)


def _measured(
    rows: list[dict], window_s: float, notes: list[str], credentials: ToolCredentials | None
) -> Measured:
    """The family's Measured of these rows (whole runs)."""
    note = leftovers_note(credentials) if credentials is not None else None
    return Measured(
        tables={"memtier": FAMILY.table("memtier", rows)},
        window_s=window_s,
        notes=notes + ([note] if note else []),
    )


FAMILY = Family(
    name="memtier",
    phase="load",
    scope="environment",
    measure=memtier,
    arguments=lambda env, profile, ctx: (env, profile.memtier, cluster_primaries(env, ctx)),
    tables=TABLES,
    settings=MemtierProfile,
    presets={
        # Three 1-second runs: noise is known at about the old single 2-second run's cost.
        "quick": MemtierProfile(test_time_s=1, repetitions=3),
        "nightly": MemtierProfile(test_time_s=10, repetitions=3),
    },
    scratch_only=True,
    tool="memtier_benchmark",
)
