"""The plan of a run: which families run where, and which environments share a host."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from yardstick.config import ConfigError, Environment
from yardstick.profiles import Profile
from yardstick.tasks.agreement import agreement
from yardstick.tasks.base import Measured, Skipped
from yardstick.tasks.contention import contention
from yardstick.tasks.counters import snapshot_counters
from yardstick.tasks.fingerprint import fingerprint
from yardstick.tasks.intrinsic import intrinsic
from yardstick.tasks.keyspace import keyspace
from yardstick.tasks.latency_monitor import collect_latency
from yardstick.tasks.memory import memory_by_difference
from yardstick.tasks.memtier import memtier
from yardstick.tasks.roundtrip import round_trip
from yardstick.tasks.slow_commands import slow_commands
from yardstick.tasks.slowlog import collect_slowlog
from yardstick.tasks.throughput import throughput
from yardstick.tasks.transport import transport
from yardstick.tools import find_tool, search_tool


@dataclass(frozen=True)
class RunContext:
    """What a family may need beyond its own environment."""

    # Facts about the embedded server binary, when the tool started the server itself.
    server_binary: dict[str, str] | None = None
    # Every environment of the run by name, for families that pair two of them.
    peers: dict[str, Environment] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """A measurement family: how to call its task, and where it may not run."""

    name: str
    run: Callable[[Environment, Profile, RunContext], Measured]
    scratch_only: bool = False
    needs_server_host: bool = False
    # A C tool the family wraps; without it the family is skipped, not failed.
    tool: str | None = None
    # Extra condition: returns why the family does not apply, or None.
    applies: Callable[[Environment], str | None] | None = None
    # What the family is asked to do: the profile settings it reads. Their digest keys its
    # figures' series, so a point is compared only with points measured the same way.
    params: Callable[[Profile], dict[str, BaseModel | float]] | None = None

    def params_json(self, profile: Profile) -> str:
        """The family's settings in `profile`, as canonical JSON ("{}" for a family with none)."""
        asked = self.params(profile) if self.params else {}
        plain = {
            name: value.model_dump(mode="json") if isinstance(value, BaseModel) else value
            for name, value in asked.items()
        }
        return json.dumps(plain, sort_keys=True, separators=(",", ":"))

    def params_digest(self, profile: Profile) -> str:
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


def _paired(env: Environment) -> str | None:
    """Transport overhead needs a same_server_as partner."""
    return None if env.same_server_as else "no same_server_as partner declared"


# In order: the fingerprint first, so every figure has the environment that produced it;
# then the machine itself (intrinsic), then the round trip.
FAMILIES: list[Family] = [
    Family("fingerprint", lambda env, profile, ctx: fingerprint(env, ctx.server_binary)),
    Family(
        "intrinsic",
        lambda env, profile, ctx: intrinsic(profile.intrinsic),
        needs_server_host=True,
        tool="redis-cli",
        params=lambda p: {"intrinsic": p.intrinsic},
    ),
    Family(
        "round_trip",
        lambda env, profile, ctx: round_trip(env, profile.round_trip),
        params=lambda p: {"round_trip": p.round_trip},
    ),
]

# Slow commands and stalls. Collection first: it reads the application's SLOWLOG entries
# before the scratch experiments fill the queue with the tool's own.
FAMILIES += [
    Family(
        "slowlog",
        lambda env, profile, ctx: collect_slowlog(env, profile.slowlog),
        params=lambda p: {"slowlog": p.slowlog},
    ),
    Family("latency_monitor", lambda env, profile, ctx: collect_latency(env)),
    Family("counters", lambda env, profile, ctx: snapshot_counters(env)),
    Family(
        "contention",
        lambda env, profile, ctx: contention(env, profile.contention),
        scratch_only=True,
        params=lambda p: {"contention": p.contention},
    ),
    Family(
        "slow_commands",
        lambda env, profile, ctx: slow_commands(env, profile.slow_commands),
        scratch_only=True,
        params=lambda p: {"slow_commands": p.slow_commands},
    ),
    Family(
        "agreement",
        lambda env, profile, ctx: agreement(env, profile.agreement),
        scratch_only=True,
        params=lambda p: {"agreement": p.agreement},
    ),
]


# Load generators last: they fill the server with the tool's own traffic.
FAMILIES += [
    Family(
        "throughput",
        lambda env, profile, ctx: throughput(env, profile.throughput),
        scratch_only=True,
        tool="redis-benchmark",
        params=lambda p: {"throughput": p.throughput},
    ),
    Family(
        "memtier",
        lambda env, profile, ctx: memtier(env, profile.memtier),
        scratch_only=True,
        tool="memtier_benchmark",
        params=lambda p: {"memtier": p.memtier},
    ),
    Family(
        "transport",
        lambda env, profile, ctx: _transport(env, profile, ctx),
        applies=_paired,
        params=lambda p: {
            "transport": p.transport,
            "throughput": p.throughput,
            "interval_ms": p.round_trip.interval_ms,
        },
    ),
]


def _transport(env: Environment, profile: Profile, ctx: RunContext) -> Measured:
    """Pair `env` with the environment it shares a server with, if that one is in the run."""
    direct = ctx.peers.get(env.same_server_as or "")
    if direct is None:
        raise Skipped(f"partner {env.same_server_as!r} is not part of this run")
    return transport(
        env, direct, profile.transport, profile.throughput, profile.round_trip.interval_ms
    )


# What a key costs: bytes per key by used_memory difference (writes, so scratch only), then
# the key space by prefix under a server-time budget (read commands only, every environment).
FAMILIES += [
    Family(
        "memory",
        lambda env, profile, ctx: memory_by_difference(env, profile.memory),
        scratch_only=True,
        params=lambda p: {"memory": p.memory},
    ),
    Family(
        "keyspace",
        lambda env, profile, ctx: keyspace(env, profile.keyspace),
        params=lambda p: {"keyspace": p.keyspace},
    ),
]


def check_families(envs: list[Environment], source: str) -> None:
    """Refuse unknown family names, and write-load families asked of a read-only environment."""
    known = {family.name: family for family in FAMILIES}
    for env in envs:
        for name in env.families or []:
            family = known.get(name)
            where = f"{source}: environment {env.name!r}, field 'families'"
            if family is None:
                raise ConfigError(f"{where}: no family {name!r} (known: {', '.join(known)})")
            if family.scratch_only and env.mode != "scratch":
                raise ConfigError(
                    f"{where}: {name} writes to the server; read-only environments never get it"
                )
        for name, timeout_s in (env.family_timeouts_s or {}).items():
            where = f"{source}: environment {env.name!r}, field 'family_timeouts_s'"
            if name not in known:
                raise ConfigError(f"{where}: no family {name!r} (known: {', '.join(known)})")
            if not timeout_s > 0:
                raise ConfigError(f"{where}: {name} must be a positive number of seconds")


def families_for(env: Environment, only: list[str] | None = None) -> list[Family]:
    """The families to attempt on `env`, in plan order (the run's and the env's selections)."""
    wanted = set(only or [f.name for f in FAMILIES]) & set(
        env.families or [f.name for f in FAMILIES]
    )
    if "fingerprint" not in wanted and env.families is not None and only is None:
        wanted.add("fingerprint")  # every figure needs the environment that produced it
    return [f for f in FAMILIES if f.name in wanted]


def _host_key(env: Environment) -> str:
    """The machine an environment's server runs on, as far as the URL tells."""
    return "localhost" if env.is_loopback else env.host.lower()


def host_groups(envs: list[Environment]) -> list[list[Environment]]:
    """Environments that share a server host (same host, or linked by same_server_as).

    Measurements within a group run one after another; groups run side by side."""
    parent = {env.name: env.name for env in envs}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def join(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    by_host: dict[str, str] = {}
    for env in envs:
        key = _host_key(env)
        if key in by_host:
            join(env.name, by_host[key])
        by_host.setdefault(key, env.name)
        if env.same_server_as in parent:
            join(env.name, env.same_server_as)
    groups: dict[str, list[Environment]] = {}
    for env in envs:
        groups.setdefault(root(env.name), []).append(env)
    return list(groups.values())


def host_group_label(group: list[Environment]) -> str:
    """A readable name for a host group (its first environment's host)."""
    return _host_key(group[0])
