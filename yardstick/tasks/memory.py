"""Bytes per key by used_memory difference (scratch only): for each shape, wait until
used_memory has stopped falling, read it, load the keys with pipelining, read it again, sample
MEMORY USAGE (default samples and SAMPLES 0), remove exactly the keys loaded, read it a third
time; repeated.

The difference is the only number that does not cheat: MEMORY USAGE leaves out the key's
share of the main table and samples aggregates. This task returns the raw readings and
samples; bytes per key, the ratios and their direction are derived in yardstick/sql/041."""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa
import redis
from pydantic import BaseModel, ConfigDict, Field, field_validator

from yardstick import interrupt
from yardstick.access.connect import open_client
from yardstick.access.environment import Environment, Mode
from yardstick.access.info import parse_info
from yardstick.access.modules import KNOWN_TYPES, module_list, own_memory_bytes
from yardstick.access.scratch import delete_by_slot
from yardstick.errors import ConfigError
from yardstick.tasks import base
from yardstick.tasks.base import UTC_TS, Family, Measured, Skipped, utc_now


class MemoryShape(BaseModel):
    """One key shape loaded for bytes per key by difference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Names the figures' subject and the keys (`<key_prefix><name>:<key_format>`).
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")
    # graph: a FalkorDB graph of `elements` nodes, each with one property of value_bytes
    # (loaded only where MODULE LIST names the graph module).
    type: Literal["string", "hash", "list", "graph"]
    # Not `keys`: a model with a `keys` attribute looks like a mapping to Prefect.
    key_count: int = Field(gt=0)
    key_format: str = "key:%06d"
    # string: the value; hash: each field's value; list: each element (the shortest one
    # when max_value_bytes is set).
    value_bytes: int = Field(default=100, ge=1)
    # Element sizes vary uniformly up to this (seeded, so every repetition loads the same).
    max_value_bytes: int | None = None
    # hash: fields per key; list: elements per key; graph: nodes per graph; string: 1.
    elements: int = Field(default=1, gt=0)


def _default_shapes(string_keys: int, aggregates: int, elements: int) -> list[MemoryShape]:
    """The seed's string keys, a hash of N equal fields, a list of varied elements."""
    return [
        MemoryShape(name="string", type="string", key_count=string_keys, key_format="key:%06d"),
        MemoryShape(
            name="hash",
            type="hash",
            key_count=aggregates,
            key_format="hash:%04d",
            value_bytes=100,
            elements=elements,
        ),
        MemoryShape(
            name="list",
            type="list",
            key_count=aggregates,
            key_format="list:%04d",
            value_bytes=10,
            max_value_bytes=300,
            elements=elements,
        ),
    ]


class MemoryProfile(BaseModel):
    """Bytes per key by used_memory difference: load, read, remove, read; repeated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shapes: list[MemoryShape] = _default_shapes(100_000, 100, 1_000)
    # One sample is not a measurement.
    repetitions: int = Field(default=3, ge=3)
    # Keys per shape and repetition read with MEMORY USAGE (default samples and SAMPLES 0).
    usage_sample_keys: int = Field(default=100, ge=1)
    # Commands per pipelined batch while loading and removing.
    pipeline: int = Field(default=1000, ge=1)
    # The classic estimate: keys x (key + value + formula_overhead_bytes).
    formula_overhead_bytes: int = 50
    # Every key the measurement writes starts with this; only such keys are ever removed.
    key_prefix: str = Field(default="yardstick:mem:", min_length=1)
    # Where a module is loaded whose keys MEMORY USAGE under-counts (FalkorDB's graph), a
    # shape of its keys is measured too (`graph`: MODULE_SHAPES), unless one is configured.
    module_shapes: bool = True
    # Environment modes the load/remove part may run on: scratch, or nothing at all.
    run_on: list[Mode] = ["scratch"]

    @field_validator("run_on")
    @classmethod
    def _never_read_only(cls, run_on: list[Mode]) -> list[Mode]:
        # Raised as ConfigError (not ValueError) so it surfaces as this one line.
        if "read-only" in run_on:
            raise ConfigError(
                "profile memory.run_on: 'read-only' is not allowed: bytes per key by difference "
                "writes and removes keys, and a read-only environment never receives a write"
            )
        return run_on


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # One row per shape and repetition: what was loaded, so payload and the classic
    # formula can be computed beside the difference.
    "memory_loads": pa.schema(
        [
            ("shape", pa.string()),
            ("repetition", pa.int32()),
            ("type", pa.string()),  # string | hash | list
            ("db", pa.int32()),
            ("keys", pa.int64()),
            ("elements_per_key", pa.int64()),
            ("key_bytes", pa.int64()),  # sum of key name lengths
            ("value_bytes", pa.int64()),  # sum of values (and hash field names)
            ("formula_overhead_bytes", pa.int64()),  # the 50 of keys x (key + value + 50)
            ("load_s", pa.float64()),
            ("started_at", UTC_TS),
        ]
    ),
    # INFO memory and DBSIZE before the load, after it, and after the removal.
    "memory_readings": pa.schema(
        [
            ("shape", pa.string()),
            ("repetition", pa.int32()),
            ("phase", pa.string()),  # before | after | removed
            ("taken_at", UTC_TS),
            ("used_memory_bytes", pa.int64()),
            ("used_memory_rss_bytes", pa.int64()),
            ("mem_fragmentation_ratio", pa.float64()),
            ("mem_clients_normal_bytes", pa.int64()),  # client buffers, for noise checks
            ("dbsize", pa.int64()),
        ]
    ),
    # MEMORY USAGE of sampled loaded keys: default samples, and SAMPLES 0 (every element).
    "memory_usage_samples": pa.schema(
        [
            ("shape", pa.string()),
            ("repetition", pa.int32()),
            ("key", pa.string()),
            ("encoding", pa.string()),
            ("elements", pa.int64()),
            ("payload_bytes", pa.int64()),  # key + value bytes of this key
            ("memory_usage_bytes", pa.int64()),
            ("memory_usage_all_bytes", pa.int64()),  # SAMPLES 0
            # The module's own figure of the key (GRAPH.MEMORY USAGE; null for core types).
            ("module_memory_bytes", pa.int64()),
        ]
    ),
}


ROLE = "memory"
# Keys under this prefix were written by the tool (this family or another one): they do not
# make a database foreign, and stay put during the measurement. Only this family's own
# prefix is ever removed.
TOOL_PREFIX = "yardstick:"
# Elements per command while loading an aggregate: one command never stalls the server long.
ELEMENTS_PER_COMMAND = 1000
LAZYFREE_WAIT_S = 10.0
# After a removal the main table of keys stays large until the server's cron shrinks it
# (within ~100 ms at hz 10): a repetition starting earlier would not pay for its own table,
# and a shrink landing mid-load would make the difference too small. The table holds one
# pointer per bucket, buckets a power of two at least the number of keys.
SETTLE_WAIT_S = 1.0
SETTLE_MIN_TABLE_BYTES = 16 * 1024
# Before each "before" reading, used_memory must have stopped falling: on Valkey the memory of
# the previous repetition (or shape, or warm-up) is still being returned for a while after
# DEL and the lazy-free counter reach zero, and a "before" read then is too high (the
# repetitions after the first read 2.3 % low). Settled: this many consecutive reads, this far
# apart, none lower than the lowest so far by more than the tolerance (client buffers and
# INFO itself move a few hundred bytes); bounded by the timeout.
STEADY_READS = 5
STEADY_POLL_S = 0.025
STEADY_TOLERANCE_BYTES = 1024
STEADY_TIMEOUT_S = 5.0


# Module key shapes, by the module MODULE LIST names: a graph of 2,000 nodes with a 10-byte
# property each (FalkorDB allocates nodes in blocks: a graph costs its blocks, not its nodes).
MODULE_SHAPES = {
    "graph": MemoryShape(
        name="graph",
        type="graph",
        key_count=5,
        key_format="graph:%04d",
        value_bytes=10,
        elements=2_000,
    ),
}


def module_shapes(client: redis.Redis, profile: MemoryProfile) -> list[MemoryShape]:
    """The module shapes to measure on this server (its modules, none configured already)."""
    if not profile.module_shapes:
        return []
    configured = {shape.type for shape in profile.shapes}
    loaded = {name for name, _version in module_list(client)}
    return [
        shape
        for module, shape in MODULE_SHAPES.items()
        if module in loaded and shape.type not in configured
    ]


class NotScratch(Exception):
    """The load/remove part was asked of an environment that is not scratch."""


class ForeignKeys(Exception):
    """The database holds keys the tool did not write: a difference there would be wrong,
    and removing them would be damage."""


def key_names(profile: MemoryProfile, shape: MemoryShape, tag: str | None = None) -> list[str]:
    """The names of a shape's keys, under the family's own prefix (and, on a cluster node,
    its hash tag: `yardstick:mem:{yst2}:string:key:000001` lives on that node)."""
    base = f"{profile.key_prefix}{tag + ':' if tag else ''}{shape.name}:{shape.key_format}"
    return [base % i for i in range(1, shape.key_count + 1)]


def element_sizes(shape: MemoryShape) -> list[list[int]]:
    """Per key, the byte size of each element (value, field value or list element).

    Seeded by the shape's name: every repetition and every run loads the same sizes."""
    if shape.max_value_bytes is None or shape.max_value_bytes <= shape.value_bytes:
        return [[shape.value_bytes] * shape.elements for _ in range(shape.key_count)]
    rng = random.Random(f"yardstick-memory-{shape.name}")
    low, high = shape.value_bytes, shape.max_value_bytes
    return [[rng.randint(low, high) for _ in range(shape.elements)] for _ in range(shape.key_count)]


def _field(index: int) -> bytes:
    """Hash field name of element `index` (fixed width, so payload is easy to state)."""
    return b"f%05d" % index


def _commands(shape: MemoryShape, names: list[str], sizes: list[list[int]]) -> Iterator[tuple]:
    """The write commands that load a shape."""
    values: dict[int, bytes] = {}

    def value(n: int) -> bytes:
        return values.get(n) or values.setdefault(n, b"v" * n)

    for name, key_sizes in zip(names, sizes, strict=True):
        if shape.type == "string":
            yield ("SET", name, value(key_sizes[0]))
            continue
        if shape.type == "graph":
            # The sizes are equal within a graph shape: one query per chunk of nodes.
            for start in range(0, len(key_sizes), ELEMENTS_PER_COMMAND):
                count = len(key_sizes[start : start + ELEMENTS_PER_COMMAND])
                text = "v" * key_sizes[0]
                yield (
                    "GRAPH.QUERY",
                    name,
                    f"UNWIND range(1, {count}) AS i CREATE (:N {{v: '{text}'}})",
                )
            continue
        for start in range(0, len(key_sizes), ELEMENTS_PER_COMMAND):
            chunk = key_sizes[start : start + ELEMENTS_PER_COMMAND]
            if shape.type == "hash":
                args: list = []
                for offset, n in enumerate(chunk):
                    args += [_field(start + offset), value(n)]
                yield ("HSET", name, *args)
            else:
                yield ("RPUSH", name, *[value(n) for n in chunk])


def payload_bytes(shape: MemoryShape, name: str, key_sizes: list[int]) -> tuple[int, int]:
    """(key bytes, value bytes) of one key: what the user thinks they store."""
    values = sum(key_sizes)
    if shape.type == "hash":
        values += sum(len(_field(i)) for i in range(len(key_sizes)))
    return len(name.encode()), values


def _reading(client: redis.Redis, shape: str, repetition: int, phase: str) -> dict:
    """used_memory and friends, and DBSIZE, at one moment."""
    dbsize = client.dbsize()
    memory = parse_info(client.info("memory")).get("memory", {})

    def number(key: str) -> int | None:
        value = memory.get(key)
        return int(value) if value not in (None, "") else None

    ratio = memory.get("mem_fragmentation_ratio")
    return {
        "shape": shape,
        "repetition": repetition,
        "phase": phase,
        "taken_at": utc_now(),
        "used_memory_bytes": number("used_memory"),
        "used_memory_rss_bytes": number("used_memory_rss"),
        "mem_fragmentation_ratio": float(ratio) if ratio else None,
        "mem_clients_normal_bytes": number("mem_clients_normal"),
        "dbsize": dbsize,
    }


def _pipelined(client: redis.Redis, commands: Iterator[tuple], batch: int) -> None:
    """Send commands in pipelined batches; any error reply is raised."""
    pipe = client.pipeline(transaction=False)
    queued = 0
    for command in commands:
        pipe.execute_command(*command)
        queued += 1
        if queued >= batch:
            pipe.execute()
            queued = 0
    if queued:
        pipe.execute()


def _remove(client: redis.Redis, names: list[str], batch: int) -> None:
    """DEL exactly these keys, then wait until a lazy free (if configured) has finished."""
    per_del = max(batch, 1)
    _pipelined(
        client, (("DEL", *names[i : i + per_del]) for i in range(0, len(names), per_del)), 16
    )
    deadline = time.monotonic() + LAZYFREE_WAIT_S
    while time.monotonic() < deadline:
        memory = parse_info(client.info("memory")).get("memory", {})
        if memory.get("lazyfree_pending_objects", "0") == "0":
            return
        interrupt.sleep(0.01)


def _used_memory(client: redis.Redis) -> int:
    """used_memory now."""
    return int(parse_info(client.info("memory"))["memory"]["used_memory"])


def table_bytes(keys: int) -> int:
    """Approximate size of the main table holding `keys` keys."""
    return 8 * (1 << max(keys - 1, 1).bit_length())


def _settle(client: redis.Redis, removed_bytes: int, keys: int) -> None:
    """After a removal, wait until the cron has shrunk the main table (used_memory drops
    by half the table's size), unless the table is too small to matter."""
    expected = table_bytes(keys)
    if expected < SETTLE_MIN_TABLE_BYTES:
        return
    deadline = time.monotonic() + SETTLE_WAIT_S
    while _used_memory(client) > removed_bytes - expected / 2:
        if time.monotonic() > deadline:
            return  # the readings show it: the next 'before' stays above the baseline
        interrupt.sleep(0.02)


def wait_until_steady(
    client: redis.Redis,
    reads: int = STEADY_READS,
    poll_s: float = STEADY_POLL_S,
    tolerance_bytes: int = STEADY_TOLERANCE_BYTES,
    timeout_s: float = STEADY_TIMEOUT_S,
) -> bool:
    """Poll used_memory until `reads` consecutive reads fall no further than `tolerance_bytes`
    below the lowest seen; False when `timeout_s` passed first (the readings then show it)."""
    deadline = time.monotonic() + timeout_s
    lowest = _used_memory(client)
    steady = 0
    while steady < reads:
        if time.monotonic() > deadline:
            return False
        interrupt.sleep(poll_s)
        now = _used_memory(client)
        if now < lowest - tolerance_bytes:
            steady = 0
        else:
            steady += 1
        lowest = min(lowest, now)
    return True


def _warm_up(
    client: redis.Redis, profile: MemoryProfile, shape: MemoryShape, tag: str | None = None
) -> None:
    """Load and remove one batch of the shape, so the connection's buffers are at their
    working size for its commands before the first reading (they count in used_memory)."""
    names = key_names(profile, shape, tag)[: profile.pipeline]
    sizes = element_sizes(shape)[: len(names)]
    try:
        _pipelined(client, _commands(shape, names, sizes), profile.pipeline)
    finally:
        _remove(client, names, profile.pipeline)
    _settle(client, _used_memory(client), len(names))


def check_database(client: redis.Redis, env: Environment, profile: MemoryProfile) -> int:
    """Refuse a database holding keys the tool did not write; remove this family's leftovers
    (a run that died halfway); return how many leftovers were removed."""
    if client.dbsize() == 0:
        return 0
    leftovers: list[str] = []
    for key in client.scan_iter(count=1000):
        if not key.startswith(TOOL_PREFIX):
            raise ForeignKeys(
                f"environment {env.name!r}: database {env.db} holds {client.dbsize()} keys, "
                f"some not written by the tool (e.g. {key[:60]!r}); bytes per key by difference "
                "needs a database only the tool writes: point the URL at an empty one "
                "(e.g. .../15)"
            )
        if key.startswith(profile.key_prefix):
            leftovers.append(key)
    if leftovers:
        _remove(client, leftovers, profile.pipeline)
    return len(leftovers)


def check_cluster_node(client: redis.Redis, env: Environment, profile: MemoryProfile) -> int:
    """On a cluster node (database 0 only, beside other keys): remove this family's leftovers
    (a run that died halfway), leave every other key alone; return how many other keys stay
    beside the measurement."""
    leftovers = list(client.scan_iter(match=f"{profile.key_prefix}*", count=1000))
    if leftovers:
        delete_by_slot(client, leftovers)
    return client.dbsize()


def cluster_note(others: int, readings: list[dict], loads: list[dict]) -> tuple[str, str | None]:
    """(note, problem) of a measurement on a cluster node: the condition it holds under, and
    the repetitions where DBSIZE says something else wrote meanwhile (None: none did)."""
    phases = {(r["shape"], r["repetition"], r["phase"]): r["dbsize"] for r in readings}
    unclean = [
        f"{load['shape']} #{load['repetition']}"
        for load in loads
        if phases.get((load["shape"], load["repetition"], "after"), 0)
        - phases.get((load["shape"], load["repetition"], "before"), 0)
        != load["keys"]
        or phases.get((load["shape"], load["repetition"], "removed"))
        != phases.get((load["shape"], load["repetition"], "before"))
    ]
    note = (
        f"measured in database 0 (a cluster node has no other) beside {others} keys the tool "
        "did not write, left untouched: the difference holds while nothing else writes to "
        f"this node; {len(loads) - len(unclean)} of {len(loads)} repetitions saw exactly the "
        "tool's keys come and go (DBSIZE)"
    )
    problem = (
        f"DBSIZE moved beside the tool's keys in {len(unclean)} repetitions "
        f"({', '.join(unclean[:5])}): another client wrote to this node meanwhile"
        if unclean
        else None
    )
    return note, problem


def _sample_usage(
    client: redis.Redis,
    shape: MemoryShape,
    repetition: int,
    names: list[str],
    sizes: list[list[int]],
    count: int,
) -> list[dict]:
    """MEMORY USAGE (default samples and SAMPLES 0) and encoding of evenly spread keys."""
    step = max(1, len(names) // count)
    chosen = list(range(0, len(names), step))[:count]
    pipe = client.pipeline(transaction=False)
    for i in chosen:
        pipe.memory_usage(names[i])
        pipe.memory_usage(names[i], samples=0)
        pipe.object("encoding", names[i])
    replies = pipe.execute()
    known = KNOWN_TYPES.get("graphdata") if shape.type == "graph" else None
    rows = []
    for n, i in enumerate(chosen):
        usage, usage_all, encoding = replies[3 * n : 3 * n + 3]
        own = own_memory_bytes(client, names[i], known) if known else None
        key_bytes, value_bytes = payload_bytes(shape, names[i], sizes[i])
        rows.append(
            {
                "shape": shape.name,
                "repetition": repetition,
                "key": names[i],
                "encoding": encoding,
                "elements": len(sizes[i]),
                "payload_bytes": key_bytes + value_bytes,
                "memory_usage_bytes": usage,
                "memory_usage_all_bytes": usage_all,
                "module_memory_bytes": own,
            }
        )
    return rows


def memory_by_difference(env: Environment, profile: MemoryProfile) -> Measured:
    """Load, read, remove, read: used_memory readings and MEMORY USAGE samples per shape."""
    if env.mode != "scratch":
        # The plan skips read-only environments; this guards any other caller.
        raise NotScratch(
            f"environment {env.name!r} is {env.mode}: bytes per key by difference writes and "
            "removes keys, so it runs on scratch environments only"
        )
    if env.mode not in profile.run_on or not (profile.shapes or profile.module_shapes):
        return Measured()
    if env.cluster and env.key_tag is None:
        raise Skipped(
            "the cluster node serves no hash slot (as discovered): it holds no keys, and keys "
            "written to it would be redirected"
        )
    client = open_client(env, ROLE)
    loads: list[dict] = []
    readings: list[dict] = []
    samples: list[dict] = []
    window_s = 0.0
    # A cluster node's keys carry its tag (so they live there), and it has database 0 only:
    # its other keys stay, untouched, and the note says so.
    tag = env.key_tag if env.cluster else None
    others: int | None = None
    shapes = [*profile.shapes, *module_shapes(client, profile)]
    if not shapes:
        client.close()
        return Measured()
    progress = base.progress()
    progress.plan(len(shapes) * profile.repetitions, "repetitions")
    clock = RepetitionClock()

    def finished(counts: tuple[int, int, int], window_s: float) -> Measured:
        """The Measured of the repetitions finished when these were the row counts."""
        n_loads, n_readings, n_samples = counts
        return _measured(
            loads[:n_loads], readings[:n_readings], samples[:n_samples], window_s, others
        )

    try:
        if env.cluster:
            others = check_cluster_node(client, env, profile)
        else:
            check_database(client, env, profile)
        for shape in shapes:
            interrupt.check()
            if not interrupt.fits(clock.estimate_s(shape)):
                # Not even its first repetition would fit: not warmed up either.
                for _ in range(profile.repetitions):
                    progress.skip(shape.name, interrupt.wont_fit())
                continue
            _warm_up(client, profile, shape, tag)
            names = key_names(profile, shape, tag)
            sizes = element_sizes(shape)
            key_bytes = value_bytes = 0
            for name, key_sizes in zip(names, sizes, strict=True):
                k, v = payload_bytes(shape, name, key_sizes)
                key_bytes, value_bytes = key_bytes + k, value_bytes + v
            for repetition in range(profile.repetitions):
                interrupt.check()
                # A repetition starts only when it can finish within the family's bound.
                if not interrupt.fits(clock.estimate_s(shape)):
                    progress.skip(shape.name, interrupt.wont_fit())
                    continue
                start = time.perf_counter()
                started_at = utc_now()
                # The "settle" reading opens the wait, "before" closes it: their times give
                # how long used_memory took to stop falling, their difference what was still
                # being returned.
                readings.append(_reading(client, shape.name, repetition, "settle"))
                wait_until_steady(client)
                readings.append(_reading(client, shape.name, repetition, "before"))
                try:
                    load_start = time.perf_counter()
                    _pipelined(client, _commands(shape, names, sizes), profile.pipeline)
                    load_s = time.perf_counter() - load_start
                    readings.append(_reading(client, shape.name, repetition, "after"))
                    samples += _sample_usage(
                        client, shape, repetition, names, sizes, profile.usage_sample_keys
                    )
                finally:
                    # Leave it as found, even when the load failed halfway.
                    _remove(client, names, profile.pipeline)
                readings.append(_reading(client, shape.name, repetition, "removed"))
                _settle(client, readings[-1]["used_memory_bytes"], shape.key_count)
                loads.append(
                    {
                        "shape": shape.name,
                        "repetition": repetition,
                        "type": shape.type,
                        "db": env.db,
                        "keys": shape.key_count,
                        "elements_per_key": shape.elements,
                        "key_bytes": key_bytes,
                        "value_bytes": value_bytes,
                        "formula_overhead_bytes": profile.formula_overhead_bytes,
                        "load_s": load_s,
                        "started_at": started_at,
                    }
                )
                window_s += time.perf_counter() - start
                clock.ran(shape, time.perf_counter() - start)
                counts = (len(loads), len(readings), len(samples))
                progress.finished(functools.partial(finished, counts, window_s))
    finally:
        client.close()
    return _measured(loads, readings, samples, window_s, others)


def _elements(shape: MemoryShape) -> int:
    """Elements one repetition of the shape loads (and removes)."""
    return shape.key_count * shape.elements


@dataclass
class RepetitionClock:
    """How long repetitions took, to tell how long the next will: the shape's own longest,
    else the slowest time per element of the other shapes; nothing yet: unknown."""

    elapsed_s: dict[str, float] = field(default_factory=dict)
    per_element_s: float | None = None

    def ran(self, shape: MemoryShape, elapsed_s: float) -> None:
        """A repetition of `shape` finished in `elapsed_s`."""
        self.elapsed_s[shape.name] = max(elapsed_s, self.elapsed_s.get(shape.name, 0.0))
        rate = elapsed_s / _elements(shape)
        self.per_element_s = max(rate, self.per_element_s or 0.0)

    def estimate_s(self, shape: MemoryShape) -> float | None:
        """Seconds a repetition of `shape` should take (None: nothing known yet)."""
        if shape.name in self.elapsed_s:
            return self.elapsed_s[shape.name]
        return None if self.per_element_s is None else self.per_element_s * _elements(shape)


def _measured(
    loads: list[dict],
    readings: list[dict],
    samples: list[dict],
    window_s: float,
    others: int | None,
) -> Measured:
    """The family's Measured of these rows (whole repetitions)."""
    notes, problems = [], []
    if others is not None:
        note, problem = cluster_note(others, readings, loads)
        notes.append(note)
        problems += [problem] if problem else []
    return Measured(
        tables={
            "memory_loads": FAMILY.table("memory_loads", loads),
            "memory_readings": FAMILY.table("memory_readings", readings),
            "memory_usage_samples": FAMILY.table("memory_usage_samples", samples),
        },
        window_s=window_s,
        problems=problems,
        notes=notes,
    )


FAMILY = Family(
    name="memory",
    # What a key costs: writes, so scratch only; after the load generators.
    phase="memory",
    scope="primary",
    measure=memory_by_difference,
    task_name="memory-by-difference",
    arguments=lambda env, profile, ctx: (env, profile.memory),
    tables=TABLES,
    settings=MemoryProfile,
    presets={
        "quick": MemoryProfile(shapes=_default_shapes(20_000, 20, 500)),
        "nightly": MemoryProfile(shapes=_default_shapes(100_000, 100, 1_000)),
    },
    scratch_only=True,
)
