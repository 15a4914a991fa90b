"""The plan of a run: in which order the families run, which of them each environment gets,
which environments share a host, and host groups run side by side. The families describe
themselves (tasks/, `FAMILY`)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from yardstick import interrupt
from yardstick.settings.config import Environment

# Re-exported: the check needs no family imported (the CLI runs it before Prefect loads).
from yardstick.settings.selection import check_families  # noqa: F401
from yardstick.tasks.base import Family, in_scope
from yardstick.tasks.registry import families

# Host groups measured side by side at most (the nightly flow's task runner has as many workers).
MAX_PARALLEL_GROUPS = 8
Done = TypeVar("Done")

# The phases of a run, in order; a family names its phase, families of one phase run in name
# order.
PHASES = (
    # The fingerprint first, so every figure has the environment that produced it.
    "identity",
    # Then the machine itself (intrinsic latency), then the round trip, before any load.
    "machine",
    "round_trip",
    # SLOWLOG, LATENCY and counters collection reads the application's entries before the
    # scratch experiments fill the queues with the tool's own.
    "collection",
    "experiments",
    # Load generators late: they fill the server with the tool's own traffic.
    "load",
    # What a key costs: bytes per key by difference (scratch), the key space by prefix.
    "memory",
)


def _in_plan_order() -> list[Family]:
    """Every declared family, by phase then name; a family of no known phase is refused."""
    declared = list(families().values())
    for family in declared:
        if family.phase not in PHASES:
            raise RuntimeError(
                f"family {family.name!r}: phase {family.phase!r} is none of {', '.join(PHASES)}"
            )
    return sorted(declared, key=lambda f: (PHASES.index(f.phase), f.name))


FAMILIES: list[Family] = _in_plan_order()


def families_for(env: Environment, only: list[str] | None = None) -> list[Family]:
    """The families to attempt on `env`, in plan order (the run's and the env's selections),
    of those that run on what `env` is (a server, a cluster, one of its nodes: tasks/base.py)."""
    wanted = set(only or [f.name for f in FAMILIES]) & set(
        env.families or [f.name for f in FAMILIES]
    )
    if "fingerprint" not in wanted and env.families is not None and only is None:
        wanted.add("fingerprint")  # every figure needs the environment that produced it
    return [f for f in FAMILIES if f.name in wanted and in_scope(f.scope, env)]


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


def each_host_group(
    envs: list[Environment],
    one_group: Callable[[list[Environment]], list[Done]],
    thread_name: str,
) -> list[Done]:
    """What `one_group` returns for each host group of `envs`, in group order: the groups side
    by side in threads of this process (no task runs), each thread in a copy of this context
    (the flow run, the run's settings, the stop's state)."""
    groups = host_groups(envs)
    with ThreadPoolExecutor(
        max_workers=max(1, min(MAX_PARALLEL_GROUPS, len(groups))), thread_name_prefix=thread_name
    ) as pool:
        futures = [
            pool.submit(contextvars.copy_context().run, one_group, group) for group in groups
        ]
        try:
            return [done for future in futures for done in future.result()]
        except BaseException as exc:
            # Ctrl-C or SIGTERM here, or a group that failed: the families of the other
            # groups stop at their next check and restore their servers before this returns
            # (leaving the pool waits for them), not after the run.
            interrupt.request_stop(f"{type(exc).__name__} received")
            for future in futures:
                future.cancel()
            raise
