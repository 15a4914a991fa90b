"""Measurement profiles: how long and how often each family measures."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from yardstick.config import ConfigError, Mode


class RoundTripProfile(BaseModel):
    """PING probe windows, like `redis-cli --latency-history -i window_s`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    windows: int = 3
    window_s: float = 1.0
    # Pause between PINGs: the probe is load too; 1 ms keeps it under ~1000 PING/s.
    interval_ms: float = 1.0


class IntrinsicProfile(BaseModel):
    """`redis-cli --intrinsic-latency duration_s` on the server host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    duration_s: int = 1


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


class TransportProfile(BaseModel):
    """Interleaved A, B, A, B single-client runs on a same_server_as pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: int = 2
    requests: int = 5_000
    ping_window_s: float = 0.5


class SlowlogProfile(BaseModel):
    """SLOWLOG collection (every environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Arguments are redacted (command and key kept, values replaced by their length)
    # unless this is set: application values can be personal data.
    keep_args: bool = False


class SlowCommandsProfile(BaseModel):
    """O(N) commands on fixture data (scratch only); the seed's sizes are the nightly ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    list_len: int = 20_000
    hash_fields: int = 5_000
    string_keys: int = 10_000
    repetitions: int = 3
    # GETs whose commandstats difference gives the per-GET baseline of the same run.
    get_calls: int = 200


class ContentionProfile(BaseModel):
    """A culprit loops SORT while a victim probes PING before, during and after."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    list_len: int = 20_000
    before_s: float = 0.5
    during_s: float = 1.0
    after_s: float = 0.5
    window_s: float = 0.5
    interval_ms: float = 1.0
    # The seed's experiment threshold: the victim waits longer than this, yet is never logged.
    slowlog_threshold_us: int = 1000
    # Bound on the culprit's load, whatever the timings.
    max_culprit_commands: int = 5000


class AgreementProfile(BaseModel):
    """One SORT seen by three instruments: outside timing, SLOWLOG, LATENCY."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    list_len: int = 50_000
    repetitions: int = 1
    latency_threshold_ms: int = 1


class MemoryShape(BaseModel):
    """One key shape loaded for bytes per key by difference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Names the figures' subject and the keys (`<key_prefix><name>:<key_format>`).
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")
    type: Literal["string", "hash", "list"]
    # Not `keys`: a model with a `keys` attribute looks like a mapping to Prefect.
    key_count: int = Field(gt=0)
    key_format: str = "key:%06d"
    # string: the value; hash: each field's value; list: each element (the shortest one
    # when max_value_bytes is set).
    value_bytes: int = Field(default=100, ge=1)
    # Element sizes vary uniformly up to this (seeded, so every repetition loads the same).
    max_value_bytes: int | None = None
    # hash: fields per key; list: elements per key; string: 1.
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


class Profile(BaseModel):
    """A named set of measurement parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    round_trip: RoundTripProfile = RoundTripProfile()
    intrinsic: IntrinsicProfile = IntrinsicProfile()
    throughput: ThroughputProfile = ThroughputProfile()
    memtier: MemtierProfile = MemtierProfile()
    transport: TransportProfile = TransportProfile()
    slowlog: SlowlogProfile = SlowlogProfile()
    slow_commands: SlowCommandsProfile = SlowCommandsProfile()
    contention: ContentionProfile = ContentionProfile()
    agreement: AgreementProfile = AgreementProfile()
    memory: MemoryProfile = MemoryProfile()
    keyspace: KeyspaceProfile = KeyspaceProfile()
    # Timeout for one measurement family on one environment.
    family_timeout_s: float = 600.0


PROFILES: dict[str, Profile] = {
    "quick": Profile(
        name="quick",
        round_trip=RoundTripProfile(windows=3, window_s=1.0, interval_ms=1.0),
        # Three 1-second runs: noise is known at about the old single 2-second run's cost.
        memtier=MemtierProfile(test_time_s=1, repetitions=3),
        memory=MemoryProfile(shapes=_default_shapes(20_000, 20, 500)),
        keyspace=KeyspaceProfile(max_keys=10_000, busy_share=0.10, max_wall_s=5.0),
        family_timeout_s=120.0,
    ),
    "nightly": Profile(
        name="nightly",
        round_trip=RoundTripProfile(windows=5, window_s=5.0, interval_ms=1.0),
        intrinsic=IntrinsicProfile(duration_s=10),
        throughput=ThroughputProfile(requests=50_000, repetitions=3),
        memtier=MemtierProfile(test_time_s=10, repetitions=3),
        transport=TransportProfile(rounds=3, requests=50_000, ping_window_s=2.0),
        slow_commands=SlowCommandsProfile(
            list_len=200_000,
            hash_fields=50_000,
            string_keys=100_000,
            repetitions=7,
            get_calls=1000,
        ),
        contention=ContentionProfile(
            list_len=200_000, before_s=3.0, during_s=5.0, after_s=3.0, window_s=1.0
        ),
        agreement=AgreementProfile(list_len=200_000, repetitions=3),
        memory=MemoryProfile(shapes=_default_shapes(100_000, 100, 1_000)),
        keyspace=KeyspaceProfile(max_keys=200_000, busy_share=0.05, max_wall_s=300.0),
    ),
}


def get_profile(name: str) -> Profile:
    """Return the built-in profile called `name`, or raise ValueError naming the choices."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown profile {name!r}: choose one of {', '.join(sorted(PROFILES))}"
        ) from None
