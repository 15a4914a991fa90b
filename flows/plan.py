"""The plan of a run: which families run on which environment, and which environments share a host."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from yardstick.config import Environment
from yardstick.profiles import Profile
from yardstick.tasks.base import Measured
from yardstick.tasks.fingerprint import fingerprint
from yardstick.tasks.roundtrip import round_trip


@dataclass(frozen=True)
class Family:
    """A measurement family: how to call its task, and where it may not run."""

    name: str
    run: Callable[[Environment, Profile, dict[str, str] | None], Measured]
    scratch_only: bool = False
    needs_server_host: bool = False

    def skip_reason(self, env: Environment) -> str | None:
        """Why this family does not run on `env`, or None when it does."""
        if self.scratch_only and env.mode != "scratch":
            return "scratch environments only (this one is read-only)"
        if self.needs_server_host and not env.on_server_host:
            return "measures the machine it runs on: the prober is not on the server host"
        return None


# In order: the fingerprint first, so every figure has the environment that produced it.
FAMILIES: list[Family] = [
    Family("fingerprint", lambda env, profile, server: fingerprint(env, server)),
    Family("round_trip", lambda env, profile, server: round_trip(env, profile.round_trip)),
]


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
