"""Read-only guard: a connection for read-only environments that refuses, before sending,
any command outside an allow-list of read commands."""

from __future__ import annotations

from typing import Any

import redis
from redis.connection import Connection, SSLConnection

# Commands allowed whatever their arguments.
READ_COMMANDS = frozenset(
    {
        "PING",
        "ECHO",
        "INFO",
        "DBSIZE",
        "TIME",
        "LASTSAVE",
        "ROLE",
        "SCAN",
        "TYPE",
        "EXISTS",
        "TTL",
        "PTTL",
        "EXPIRETIME",
        "PEXPIRETIME",
        # Length commands (for big keys). Values themselves are never read: the
        # tool has no use for them, and reads would touch the keys' LRU clock.
        "STRLEN",
        "LLEN",
        "HLEN",
        "SCARD",
        "ZCARD",
        "XLEN",
        # Connection state only; nothing in the dataset changes.
        "AUTH",
        "HELLO",
        "SELECT",
        "QUIT",
        "RESET",
        "READONLY",
    }
)
# Container commands whose subcommand decides whether they read.
READ_SUBCOMMANDS = {
    "CONFIG": frozenset({"GET"}),
    "SLOWLOG": frozenset({"GET", "LEN", "HELP"}),
    "LATENCY": frozenset({"LATEST", "HISTORY", "DOCTOR", "GRAPH", "HISTOGRAM", "HELP"}),
    "MEMORY": frozenset({"USAGE", "STATS", "DOCTOR", "MALLOC-STATS", "HELP"}),
    "OBJECT": frozenset({"ENCODING", "FREQ", "IDLETIME", "REFCOUNT", "HELP"}),
    # NO-TOUCH (7.2+) changes only how this connection's reads treat the keys' LRU/LFU clocks:
    # ON leaves them as they were (the key-space scan's length commands).
    "CLIENT": frozenset({"SETNAME", "GETNAME", "SETINFO", "ID", "INFO", "LIST", "NO-TOUCH"}),
    "COMMAND": frozenset({"COUNT", "DOCS", "INFO", "LIST", "GETKEYS"}),
    "CLUSTER": frozenset({"INFO", "NODES", "SLOTS", "SHARDS", "MYID"}),
    # The modules loaded (names and versions), never LOAD or UNLOAD.
    "MODULE": frozenset({"LIST"}),
    # FalkorDB's memory figure of one graph: it reads the graph, never changes it (the
    # key-space scan sizes graph keys with it: MEMORY USAGE leaves a graph out).
    "GRAPH.MEMORY": frozenset({"USAGE"}),
    # What a Sentinel knows of a master; never SET, RESET, FAILOVER or MONITOR.
    "SENTINEL": frozenset(
        {"GET-MASTER-ADDR-BY-NAME", "MASTER", "MASTERS", "REPLICAS", "SLAVES", "SENTINELS", "MYID"}
    ),
}


class ReadOnlyViolation(redis.exceptions.RedisError):
    """A command refused by the read-only guard; it never left this process."""


def _word(arg: Any) -> str:
    """Upper-cased text of one command word (bytes or str)."""
    if isinstance(arg, bytes | bytearray | memoryview):
        return bytes(arg).decode("latin-1").upper()
    return str(arg).upper()


def check_read_only(args: tuple[Any, ...]) -> None:
    """Raise ReadOnlyViolation unless `args` is an allow-listed read command."""
    if not args:
        raise ReadOnlyViolation("read-only guard: empty command refused")
    # redis-py may pass "CONFIG GET" as one first argument.
    words = _word(args[0]).split() + [_word(a) for a in args[1:2]]
    command = words[0]
    if command in READ_COMMANDS:
        return
    allowed = READ_SUBCOMMANDS.get(command)
    sub = words[1] if len(words) > 1 else ""
    if allowed is not None and sub in allowed:
        return
    shown = f"{command} {sub}".strip() if allowed is not None else command
    raise ReadOnlyViolation(f"read-only guard: {shown} refused before sending (not a read command)")


class _GuardedPacker:
    """Wraps redis-py's command packer: every command, pipelined or not, is packed here."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def pack(self, *args: Any) -> Any:
        check_read_only(args)
        return self._inner.pack(*args)


class ReadOnlyConnection(Connection):
    """TCP connection whose every outgoing command passes the read-only check."""

    def _construct_command_packer(self, packer: Any) -> Any:
        return _GuardedPacker(super()._construct_command_packer(packer))


class ReadOnlySSLConnection(SSLConnection):
    """TLS connection whose every outgoing command passes the read-only check."""

    def _construct_command_packer(self, packer: Any) -> Any:
        return _GuardedPacker(super()._construct_command_packer(packer))
