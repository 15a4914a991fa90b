"""What a measurement family is (its declaration) and what every family's function returns.

Plain Python: no Prefect here nor in any family module (tests/test_layers.py checks it);
yardstick/flows/landing.py makes each family's function a Prefect task."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from yardstick.access.environment import Environment
from yardstick.host.tools import find_tool, search_tool

# The lake table of the host's load sampled through each family (yardstick/host/familyload.py).
FAMILY_LOAD = "family_load"
# Every timestamp column of the lake: microseconds, UTC.
UTC_TS = pa.timestamp("us", tz="UTC")
# One command's INFO commandstats counters, as every table of them ends.
COMMANDSTATS_COUNTERS = [
    pa.field("command", pa.string()),
    pa.field("calls", pa.int64()),
    pa.field("usec", pa.int64()),
    pa.field("rejected_calls", pa.int64()),
    pa.field("failed_calls", pa.int64()),
]


@dataclass
class Measured:
    """Tables produced by one family on one environment, and time spent inside its windows."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    window_s: float = 0.0
    # Parts that failed while the rest was measured (e.g. a benchmark cell that timed out):
    # the tables still land, the step is marked failed with these reasons.
    problems: list[str] = field(default_factory=list)
    # What the family did beside measuring that the report must say (e.g. what it cleaned
    # up after a killed run); the step stays ok.
    notes: list[str] = field(default_factory=list)


@dataclass
class Progress:
    """How far the family running in this context got: the units it planned (cells,
    repetitions, windows, rounds), how many it finished, which it did not start and why, and
    how to build the Measured of the finished ones. yardstick/flows/landing.run_family lands that
    Measured when the family is stopped by its bound or by Ctrl-C: finished measurement is
    never thrown away, and a unit cut halfway is never in it."""

    unit: str = "units"
    planned: int = 0
    done: int = 0
    # (what, why) of each planned unit not started: ("c50 P16 3B", "would not finish ...").
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # (what, why) of each unit started but not counted as finished (a round whose benchmark
    # was killed): its rows may land, its figures leave it out, the step is partial.
    dropped: list[tuple[str, str]] = field(default_factory=list)
    # Builds a Measured of every finished unit; called after the family's own cleanup ran
    # (its `finally` blocks), so what they close (a SLOWLOG span) is closed by then.
    snapshot: Callable[[], Measured] | None = None

    def plan(self, planned: int, unit: str) -> None:
        """Start (or, on a retry, start again): `planned` units of `unit` to come."""
        self.unit, self.planned, self.done, self.skipped, self.snapshot = unit, planned, 0, [], None
        self.dropped = []

    def finished(self, snapshot: Callable[[], Measured], units: int = 1) -> None:
        """`units` more finished; `snapshot` builds the Measured of all finished so far."""
        self.done += units
        self.snapshot = snapshot

    def skip(self, what: str, why: str) -> None:
        """A planned unit not started, and why."""
        self.skipped.append((what, why))

    def drop(self, what: str, why: str, snapshot: Callable[[], Measured]) -> None:
        """A unit that ran but is not counted as finished, and why; `snapshot` builds the
        Measured of what landed so far (its rows included)."""
        self.dropped.append((what, why))
        self.snapshot = snapshot

    @property
    def partial(self) -> bool:
        """Whether fewer units finished than were planned."""
        return self.planned > 0 and self.done < self.planned

    def summary(self) -> str:
        """'12 of 16 cells', then what was skipped and why (the step's reason says it)."""
        text = f"{self.done} of {self.planned} {self.unit}"
        for verb, units in (("skipped", self.skipped), ("dropped", self.dropped)):
            text += self._counted(verb, units)
        return text

    @staticmethod
    def _counted(verb: str, units: list[tuple[str, str]]) -> str:
        """'; skipped 2 (a, b): why' for each reason units were left out for."""
        text = ""
        by_why: dict[str, list[str]] = {}
        for what, why in units:
            by_why.setdefault(why, []).append(what)
        for why, whats in by_why.items():
            # The same unit skipped in several repetitions is named once, with its count.
            counted = {what: whats.count(what) for what in dict.fromkeys(whats)}
            named = [f"{what} ×{n}" if n > 1 else what for what, n in counted.items()]
            shown = ", ".join(named[:6]) + (f" and {len(named) - 6} more" if len(named) > 6 else "")
            text += f"; {verb} {len(whats)} ({shown}): {why}"
        return text


_progress: ContextVar[Progress | None] = ContextVar("yardstick_family_progress", default=None)


def progress() -> Progress:
    """The progress of the family running in this context (run_family registers one); a
    fresh one nobody reads when the family is called on its own."""
    return _progress.get() or Progress()


@contextmanager
def tracking_progress() -> Iterator[Progress]:
    """Register a Progress for the family the block runs (seen in Prefect's task threads,
    which run in a copy of this context)."""
    tracked = Progress()
    token = _progress.set(tracked)
    try:
        yield tracked
    finally:
        _progress.reset(token)


class Skipped(Exception):
    """A family that cannot apply to this environment in this run (recorded as skipped)."""


def utc_now() -> datetime:
    """Current time, timezone-aware UTC (what the lake stores)."""
    return datetime.now(UTC)


def rows_to_table(table: str, schema: pa.Schema, rows: list[dict]) -> pa.Table:
    """Build an Arrow table of `schema` from row dicts (unknown keys are an error)."""
    extra = {key for row in rows for key in row} - set(schema.names)
    if extra:
        raise ValueError(f"table {table!r}: unknown columns {sorted(extra)}")
    return pa.Table.from_pylist(rows, schema=schema)


@dataclass(frozen=True)
class Landed:
    """What the lake already holds of one environment's collections, read from complete runs
    only (their `runs` row has landed) started before this run: the cursors a collection lands
    above. Empty: nothing known, land everything (the SQL deduplicates what recurs)."""

    # Server run id -> the highest SLOWLOG entry id landed (ids only grow within a server
    # process, SLOWLOG RESET does not rewind them; a restart is a new server run id).
    slowlog_ids: Mapping[str, int] = field(default_factory=dict)
    # (server run id, event) -> the newest LATENCY HISTORY sample landed.
    latency_at: Mapping[tuple[str, str], datetime] = field(default_factory=dict)
    # The runs those came from (None: none), for whoever asks why a collection landed little.
    slowlog_run_id: str | None = None
    latency_run_id: str | None = None
    # Why the lake could not be read (everything is landed then), said in the step's reason.
    problem: str | None = None


@dataclass(frozen=True)
class RunContext:
    """What a family may need beyond its own environment."""

    # Facts about the embedded server binary, when the tool started the server itself.
    server_binary: dict[str, str] | None = None
    # Every environment of the run by name, for families that pair two of them.
    peers: dict[str, Environment] = field(default_factory=dict)
    # Environment name -> what the lake already holds of its collections (the flows fill it
    # from their lake; yardstick/storage/cursors.py). Called when a collected family starts,
    # inside the host's lock; None: land everything.
    landed: Callable[[str], Landed] | None = None

    # What the environment is made of (yardstick/access/topology.py), found when it starts.
    shape: Any = None

    def landed_of(self, env: Environment) -> Landed | None:
        """What the lake holds of `env`'s collections, or None without a lake to ask."""
        return self.landed(env.name) if self.landed is not None else None


# Which of an environment's servers a family runs on (flows/units.py splits an environment into
# them): "node" every server (a standalone one, a Sentinel master, each cluster node and each
# replica), "primary" the servers holding data as primaries, "experiment" the one primary the
# experiments' keys live on, "environment" the environment as a whole (a standalone server,
# a Sentinel master, or the cluster through its seed: cluster-mode load, the host's machine),
# "all" the environment and every node.
SCOPES = ("node", "primary", "experiment", "environment", "all")


def unit_kind(env: Environment) -> str:
    """What `env` is in its environment: server (standalone or Sentinel master), cluster (a
    cluster as a whole), primary or replica (a node of a cluster or a replica)."""
    if env.member_of is None:
        return "cluster" if env.cluster else "server"
    return "primary" if env.node_role == "primary" else "replica"


def in_scope(scope: str, env: Environment) -> bool:
    """Whether a family of `scope` runs on `env` (one of an environment's servers)."""
    kind = unit_kind(env)
    if scope == "all":
        return True
    if scope == "node":
        return kind != "cluster"
    if scope == "primary":
        return kind in ("server", "primary")
    if scope == "experiment":
        return kind == "server" or (kind == "primary" and env.runs_experiments)
    if scope == "environment":
        return kind in ("server", "cluster")
    raise ValueError(f"unknown scope {scope!r}")


# The arguments of a family's function, from the environment, the run's profile and its context.
Arguments = Callable[[Environment, Any, RunContext], tuple]


# eq=False: a declaration is itself (hashable by identity), whatever its fields hold; the
# flows keep one Prefect task per family by it.
@dataclass(frozen=True, eq=False)
class Family:
    """A measurement family, declared by its own module (`FAMILY = Family(...)` in tasks/):
    what it is called, when and where it runs, the tables it lands, its profile settings, its
    function and its retries. tasks/registry.py collects the declarations; flows/plan.py orders
    them by phase; flows/landing.py runs the function (a task run in a flow run)."""

    name: str
    # When in a run: one of yardstick/flows/plan.PHASES (families of a phase run in name order).
    phase: str
    # The plain function that measures and returns a Measured, and how its arguments come
    # from (env, profile, context).
    measure: Callable[..., Measured]
    arguments: Arguments
    # The lake tables it lands, with their Arrow schemas (yardstick/storage/schemas.py adds
    # the run's own tables).
    tables: dict[str, pa.Schema]
    # Its settings in a profile (the profile's field is the family's name), and their values
    # in named profiles ("quick", "nightly"); the settings' defaults elsewhere.
    settings: type[BaseModel] | None = None
    presets: dict[str, BaseModel] = field(default_factory=dict)
    scratch_only: bool = False
    # Which of the environment's servers it runs on (SCOPES).
    scope: str = "node"
    needs_server_host: bool = False
    # A C tool the family wraps; without it the family is skipped, not failed.
    tool: str | None = None
    # Extra condition: returns why the family does not apply, or None.
    applies: Callable[[Environment], str | None] | None = None
    # What the family is asked to do: the profile settings it reads (default: its own). Their
    # digest keys its figures' series, so a point is compared only with points measured the
    # same way.
    params: Callable[[Any], dict[str, BaseModel | float]] | None = None
    # Part of the 5-minute collection (reads only, cheap): yardstick/flows/collect.py runs these.
    collected: bool = False
    # Tables of per-sample detail that retention drops after `detail_days`, keeping the
    # figures derived from them (yardstick/storage/retention.py).
    detail_tables: tuple[str, ...] = ()
    # Its step's name in Prefect's UI and the terminal (`round-trip[scratch-a]`, the task
    # run's); default: the family's name with dashes.
    task_name: str = ""
    # How many times a failure is tried again (a skip, a stop or the bound never is), after
    # `retry_delay_s`: Prefect retries its task run, a plain call (the one-shot CLI, the
    # collection) retries the same way (yardstick/flows/landing.py).
    retries: int = 0
    retry_delay_s: float = 0.0

    def __post_init__(self) -> None:
        """Name the step after the family when its module names it no other way."""
        if not self.task_name:
            object.__setattr__(self, "task_name", self.name.replace("_", "-"))

    def table(self, name: str, rows: list[dict]) -> pa.Table:
        """Rows of one of the family's tables as an Arrow table of its declared schema."""
        return rows_to_table(name, self.tables[name], rows)

    def asked(self, profile: Any) -> dict[str, BaseModel | float]:
        """The profile settings this family reads."""
        if self.params is not None:
            return self.params(profile)
        return {self.name: getattr(profile, self.name)} if self.settings else {}

    def params_json(self, profile: Any) -> str:
        """The family's settings in `profile`, as canonical JSON ("{}" for a family with none)."""
        plain = {
            name: value.model_dump(mode="json") if isinstance(value, BaseModel) else value
            for name, value in self.asked(profile).items()
        }
        return json.dumps(plain, sort_keys=True, separators=(",", ":"))

    def params_digest(self, profile: Any) -> str:
        """A short digest of params_json: equal digests, same workload."""
        return hashlib.sha256(self.params_json(profile).encode()).hexdigest()[:12]

    def skip_reason(self, env: Environment) -> str | None:
        """Why this family does not run on `env`, or None when it does."""
        if self.scratch_only and env.mode != "scratch":
            return "scratch environments only (this one is read-only)"
        if self.needs_server_host and not env.on_server_host:
            return "measures the machine it runs on: the prober is not on the server host"
        if self.tool and find_tool(self.tool) is None:
            refused = search_tool(self.tool).refused
            # A binary whose version cannot be told is not used: say so rather than "absent".
            why = search_tool(self.tool).described if refused else "not installed"
            return f"skipped: {self.tool} {why}"
        if self.applies is not None:
            return self.applies(env)
        return None
