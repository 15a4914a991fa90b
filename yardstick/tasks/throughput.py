"""Throughput: the redis-benchmark matrix (clients × pipeline × payload × test), each cell
repeated, on scratch environments only. Runs in a dedicated, empty database and removes
what it wrote; on a Redis Cluster (`--cluster`, database 0 only) each primary is claimed and
exactly the keys redis-benchmark names there are removed (yardstick/access/benchdb.py)."""

from __future__ import annotations

import csv
import functools
import io
import itertools
import re
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from yardstick import interrupt
from yardstick.access.benchdb import claimed_nodes, empty_database
from yardstick.access.environment import Environment
from yardstick.access.topology import member
from yardstick.host.hostload import busy_share, cpu_times
from yardstick.host.tool_auth import (
    ToolAuthUnavailable,
    ToolCredentials,
    leftovers_note,
    tool_credentials,
)
from yardstick.host.tool_tls import tls_args
from yardstick.host.tools import Tool, ToolFailed, ToolTimeout, find_tool, run_tool
from yardstick.tasks import base
from yardstick.tasks.base import UTC_TS, Family, Measured, RunContext, Skipped, unit_kind, utc_now

# redis-benchmark learned --cluster in Redis 6.0.
CLUSTER_SINCE = (6, 0, 0)
# Under a bound, the first cell's time is unknown: a pilot of 1/PILOT_SHARE of its requests
# (at least PILOT_MIN_REQUESTS) runs first. The full cell follows when the pilot says it fits;
# when it does not, the pilot is kept as that cell, its reduced size stated in its rows
# (`requests`) and the step (a loaded host lands something, not one cell cut at the bound).
PILOT_SHARE = 10
PILOT_MIN_REQUESTS = 1_000


class ThroughputProfile(BaseModel):
    """The redis-benchmark matrix (scratch only): every combination, each repeated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clients: list[int] = [1, 50]
    pipelines: list[int] = [1, 16]
    payloads_bytes: list[int] = [3, 100]
    tests: list[str] = ["set", "get"]
    # Requests per cell without pipelining; a cell with pipeline P sends P times as many.
    requests: int = 5_000
    repetitions: int = 2
    # The benchmark writes here; it must be empty before, and is emptied of them after.
    db: int = 15
    timeout_s: float = 120.0


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # redis-benchmark --csv: one row per test per cell invocation (failed ones included).
    "benchmark": pa.schema(
        [
            ("repetition", pa.int32()),
            ("clients", pa.int32()),
            ("pipeline", pa.int32()),
            ("payload_bytes", pa.int32()),
            ("requests", pa.int64()),
            ("test", pa.string()),
            # ok | failed | interrupted (cut by Ctrl-C or the family's bound: never a figure)
            ("status", pa.string()),
            ("error", pa.string()),
            ("rps", pa.float64()),
            ("avg_ms", pa.float64()),
            ("min_ms", pa.float64()),
            ("p50_ms", pa.float64()),
            ("p95_ms", pa.float64()),
            ("p99_ms", pa.float64()),
            ("max_ms", pa.float64()),
            ("started_at", UTC_TS),
            ("elapsed_s", pa.float64()),
            ("host_busy_share", pa.float64()),
            ("tool_version", pa.string()),
        ]
    ),
}


CSV_FIELDS = {
    "rps": "rps",
    "avg_latency_ms": "avg_ms",
    "min_latency_ms": "min_ms",
    "p50_latency_ms": "p50_ms",
    "p95_latency_ms": "p95_ms",
    "p99_latency_ms": "p99_ms",
    "max_latency_ms": "max_ms",
}


# What redis-benchmark --cluster prints before its CSV: the primaries it found.
CLUSTER_PREAMBLE_RE = re.compile(r"Cluster has \d+ master nodes:|Master \d+: \S+ \S+")


def parse_benchmark_csv(text: str) -> list[dict]:
    """Rows of `redis-benchmark --csv`: 6.2+ has a header and latency columns; 6.0 has
    no header and two columns (test, rps). With --cluster, the primaries' list it prints
    first is left out."""
    lines = [line for line in text.splitlines() if not CLUSTER_PREAMBLE_RE.fullmatch(line)]
    records = [r for r in csv.reader(io.StringIO("\n".join(lines))) if r and r[0].strip()]
    if not records:
        raise ValueError("redis-benchmark printed no CSV rows")
    if records[0][0] == "test":
        header = records[0]
        rows = []
        for record in records[1:]:
            values = dict(zip(header, record, strict=False))
            row = {"test": values["test"]}
            row.update({CSV_FIELDS[k]: float(v) for k, v in values.items() if k in CSV_FIELDS})
            rows.append(row)
        return rows
    return [{"test": record[0], "rps": float(record[1])} for record in records]


def benchmark_args(
    tool: Tool,
    env: Environment,
    db: int,
    clients: int,
    pipeline: int,
    payload_bytes: int,
    requests: int,
    tests: list[str],
    credentials: ToolCredentials | None = None,
    cluster: bool = False,
) -> list[str]:
    """The redis-benchmark command line for one cell. It never holds the environment's
    password: only a per-run ACL user's (yardstick.host.tool_auth), deleted after the run.
    redis-benchmark reads no password variable (REDISCLI_AUTH is redis-cli's) nor file.
    `cluster`: the whole cluster through the URL's node (--cluster, no database: a cluster
    has database 0 only)."""
    where = ["--cluster"] if cluster else ["--dbnum", str(db)]
    args = [
        tool.path,
        "-h",
        env.host,
        "-p",
        str(env.port),
        *where,
        "-c",
        str(clients),
        "-P",
        str(pipeline),
        "-d",
        str(payload_bytes),
        "-n",
        str(requests),
        "-t",
        ",".join(tests),
        "--csv",
    ]
    if credentials is not None and credentials.user is not None:
        args += ["--user", credentials.user, "-a", str(credentials.password)]
    return args + tls_args(env, "redis-benchmark")


def run_cell(
    tool: Tool,
    env: Environment,
    profile: ThroughputProfile,
    cell: dict,
    credentials: ToolCredentials | None = None,
) -> list[dict]:
    """One redis-benchmark invocation; failures become rows with an error, not exceptions.

    Without `credentials` (a cell run alone, as transport does) the cell gets its own
    per-run ACL user when the environment has a password."""
    if credentials is None:
        try:
            with tool_credentials(env, "throughput") as own:
                return run_cell(tool, env, profile, cell, own)
        except ToolAuthUnavailable as exc:
            return unrun_rows(tool, profile, cell, "failed", exc)
    started_at, cpu_before, start = utc_now(), cpu_times(), time.perf_counter()
    # Deeper pipelines finish the same count far sooner: scale it so every cell runs
    # long enough to be timed.
    requests = profile.requests * cell["pipeline"]
    base = {
        **cell,
        "started_at": started_at,
        "requests": requests,
        "tool_version": tool.version_text,
    }
    args = benchmark_args(
        tool,
        env,
        profile.db,
        cell["clients"],
        cell["pipeline"],
        cell["payload_bytes"],
        requests,
        profile.tests,
        credentials,
        cluster=unit_kind(env) == "cluster",
    )
    try:
        parsed = parse_benchmark_csv(run_tool(args, timeout_s=profile.timeout_s))
        status, error = "ok", None
    except (ToolTimeout, ToolFailed, ValueError) as exc:
        parsed, status, error = [{"test": t.upper()} for t in profile.tests], "failed", str(exc)
    timing = {
        "elapsed_s": time.perf_counter() - start,
        "host_busy_share": busy_share(cpu_before, cpu_times()),
    }
    return [{**base, **row, **timing, "status": status, "error": error} for row in parsed]


def cluster_primaries(env: Environment, context: RunContext) -> list[Environment] | None:
    """The primaries a cluster load writes to, each as its member environment (its hash tag
    for the claim); None when `env` is not a cluster as a whole."""
    shape = context.shape
    if unit_kind(env) != "cluster" or shape is None:
        return None
    return [member(shape.env, node) for node in shape.primaries if node.host and node.slot_ranges]


def throughput(
    env: Environment, profile: ThroughputProfile, primaries: list[Environment] | None = None
) -> Measured:
    """Run the matrix; repetitions are the outer loop so slow drift spreads over all cells.
    The family's bound is a budget: a cell starts only when it can finish within what is
    left (CellClock), the others are named in the step; every finished cell is handed over
    as it ends (base.progress), so a stop lands them.

    `primaries`: a cluster as a whole, loaded through its seed; every primary is claimed
    and left with none of redis-benchmark's keys."""
    tool = find_tool("redis-benchmark")
    if tool is None:
        raise RuntimeError("redis-benchmark not installed")
    if unit_kind(env) == "cluster":
        if tool.version < CLUSTER_SINCE:
            raise Skipped(
                f"redis-benchmark {tool.version_text} has no --cluster (6.0 and later): "
                "a cluster cannot be loaded as a whole"
            )
        if not primaries:
            raise Skipped("the cluster's primaries are not known (no topology this run)")
    rows: list[dict] = []
    cells = list(itertools.product(profile.clients, profile.pipelines, profile.payloads_bytes))
    progress = base.progress()
    progress.plan(profile.repetitions * len(cells), "cells")
    clock = CellClock()
    notes: list[str] = []  # what an interrupted run left in the database, if anything
    credentials: ToolCredentials | None = None

    def finished(count: int) -> Measured:
        """The Measured of the first `count` rows: whole cells only (a cell's rows are
        appended together, once its redis-benchmark has exited)."""
        return _measured(rows[:count], notes, credentials)

    def cut_or_run(sized: ThroughputProfile, cell: dict) -> list[dict]:
        """One cell's rows; a cell cut halfway (Ctrl-C, the bound) lands as interrupted,
        never a figure, beside the finished ones, and the stop goes on up."""
        try:
            return run_cell(tool, env, sized, cell, credentials)
        except (interrupt.Interrupted, interrupt.FamilyTimeout) as exc:
            rows.extend(cut_rows(tool, sized, cell, exc))
            progress.drop(cell_label(cell), "cut", functools.partial(finished, len(rows)))
            raise

    with ExitStack() as stack:
        try:
            # In cluster mode the tool authenticates on every primary: the user is on each.
            credentials = stack.enter_context(
                tool_credentials(env, "throughput", also_on=primaries or ())
            )
        except ToolAuthUnavailable as exc:
            raise Skipped(str(exc)) from None
        if primaries:
            stack.enter_context(claimed_nodes(primaries, "throughput", notes))
        else:
            stack.enter_context(empty_database(env, profile.db, "throughput", notes))
        for repetition in range(profile.repetitions):
            for clients, pipeline, payload_bytes in cells:
                interrupt.check()
                cell = {
                    "repetition": repetition,
                    "clients": clients,
                    "pipeline": pipeline,
                    "payload_bytes": payload_bytes,
                }
                # A cell starts only when it can finish within the family's bound: one killed
                # at the bound is time spent for nothing, and the later cells still fit.
                requests = profile.requests * pipeline * len(profile.tests)
                estimate_s = clock.estimate_s(clients, pipeline, payload_bytes, requests)
                sized, cell_rows = profile, None
                if estimate_s is None and interrupt.remaining_s() is not None:
                    # Bounded, and nothing known of a cell's time yet: a pilot tells.
                    pilot = pilot_profile(profile)
                    if pilot is not None:
                        pilot_rows = cut_or_run(pilot, cell)
                        estimate_s = full_estimate_s(pilot_rows, pilot, profile)
                        if not interrupt.fits(estimate_s):
                            # The full cell would not finish: the pilot is the cell, smaller.
                            sized, cell_rows = pilot, pilot_rows
                            notes.append(reduced_note(cell, pilot, profile))
                if cell_rows is None:
                    if not interrupt.fits(estimate_s):
                        progress.skip(cell_label(cell), interrupt.wont_fit())
                        continue
                    cell_rows = cut_or_run(profile, cell)
                elapsed_s = cell_rows[0]["elapsed_s"]
                if sized is profile:
                    clock.ran(clients, pipeline, payload_bytes, requests, elapsed_s)
                else:  # its rate only: a full-size repetition of it takes longer
                    clock.rated(sized.requests * pipeline * len(profile.tests), elapsed_s)
                rows += cell_rows
                progress.finished(functools.partial(finished, len(rows)))
    return _measured(rows, notes, credentials)


def pilot_profile(profile: ThroughputProfile) -> ThroughputProfile | None:
    """The first cell's pilot: a tenth of its requests (at least PILOT_MIN_REQUESTS); None
    when the cell is that small already (it is its own pilot)."""
    requests = max(PILOT_MIN_REQUESTS, profile.requests // PILOT_SHARE)
    return (
        None if requests >= profile.requests else profile.model_copy(update={"requests": requests})
    )


def full_estimate_s(
    pilot_rows: list[dict], pilot: ThroughputProfile, profile: ThroughputProfile
) -> float | None:
    """How long the full cell should take, from its pilot's time (None: the pilot failed,
    and the full cell says what fails, as it did before)."""
    if any(row["status"] != "ok" for row in pilot_rows):
        return None
    return pilot_rows[0]["elapsed_s"] * profile.requests / pilot.requests


def reduced_note(cell: dict, sized: ThroughputProfile, profile: ThroughputProfile) -> str:
    """What the step and the report say of a first cell run smaller than the profile's."""
    return (
        f"{cell_label(cell)} repetition {cell['repetition'] + 1} ran "
        f"{sized.requests * cell['pipeline']:,} requests per test, not "
        f"{profile.requests * cell['pipeline']:,}: at its pilot's rate the full cell "
        f"{interrupt.wont_fit()}"
    )


def cut_rows(tool: Tool, profile: ThroughputProfile, cell: dict, cut: Exception) -> list[dict]:
    """The rows of a cell cut halfway (Ctrl-C, the family's bound): status interrupted."""
    return unrun_rows(tool, profile, cell, "interrupted", cut)


def unrun_rows(
    tool: Tool, profile: ThroughputProfile, cell: dict, status: str, why: Exception
) -> list[dict]:
    """One row per test of a cell that gave no figure (`status` failed or interrupted)."""
    return [
        {
            **cell,
            "started_at": utc_now(),
            "requests": profile.requests * cell["pipeline"],
            "tool_version": tool.version_text,
            "test": test.upper(),
            "elapsed_s": 0.0,
            "status": status,
            "error": str(why),
        }
        for test in profile.tests
    ]


def cell_label(cell: dict) -> str:
    """A cell's name without its test, as the report's cells read: `c50 P16 3B`."""
    return f"c{cell['clients']} P{cell['pipeline']} {cell['payload_bytes']}B"


@dataclass
class CellClock:
    """How long the cells took so far, to tell how long the next one will: the same cell in
    an earlier repetition, else a cell with its clients and pipeline (payload changes little),
    else the slowest request rate seen; nothing seen: unknown (the first cell starts)."""

    elapsed_s: dict[tuple[int, int, int], float] = field(default_factory=dict)
    rates: list[float] = field(default_factory=list)  # requests per second of each cell

    def ran(self, clients: int, pipeline: int, payload: int, requests: int, elapsed: float) -> None:
        """One cell finished in `elapsed` seconds (its longest run is kept)."""
        key = (clients, pipeline, payload)
        self.elapsed_s[key] = max(elapsed, self.elapsed_s.get(key, 0.0))
        if elapsed > 0:
            self.rates.append(requests / elapsed)

    def rated(self, requests: int, elapsed: float) -> None:
        """A cell of another size than its profile's (the pilot kept): its rate only."""
        if elapsed > 0:
            self.rates.append(requests / elapsed)

    def estimate_s(self, clients: int, pipeline: int, payload: int, requests: int) -> float | None:
        """Seconds the cell should take (None: nothing known yet)."""
        if (clients, pipeline, payload) in self.elapsed_s:
            return self.elapsed_s[(clients, pipeline, payload)]
        alike = [s for (c, p, _), s in self.elapsed_s.items() if (c, p) == (clients, pipeline)]
        if alike:
            return max(alike)
        return requests / min(self.rates) if self.rates else None


def _measured(rows: list[dict], notes: list[str], credentials: ToolCredentials | None) -> Measured:
    """The family's Measured of these rows (whole cells)."""
    failed = [r for r in rows if r["status"] not in ("ok", "interrupted")]
    problems = (
        [f"{len(failed)} of {len(rows)} benchmark rows failed: {failed[0]['error']}"]
        if failed
        else []
    )
    note = leftovers_note(credentials) if credentials is not None else None
    return Measured(
        tables={"benchmark": FAMILY.table("benchmark", rows)},
        # Each cell's rows share its elapsed time: count it once per cell.
        window_s=sum({(r["repetition"], cell_label(r)): r["elapsed_s"] for r in rows}.values()),
        problems=problems,
        notes=notes + ([note] if note else []),
    )


FAMILY = Family(
    name="throughput",
    phase="load",
    scope="environment",
    measure=throughput,
    arguments=lambda env, profile, ctx: (env, profile.throughput, cluster_primaries(env, ctx)),
    tables=TABLES,
    settings=ThroughputProfile,
    presets={"nightly": ThroughputProfile(requests=50_000, repetitions=3)},
    scratch_only=True,
    tool="redis-benchmark",
)
