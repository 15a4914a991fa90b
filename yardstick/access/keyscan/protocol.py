"""The scan's wire protocol: its commands, encoded once and checked by the read-only guard once,
its reply reader, and what a round carries (a batch of keys, one stage's asks for it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from yardstick.access.guard import check_read_only
from yardstick.access.keyscan.result import ScanError
from yardstick.access.resp import Reader, bulk, bulks_of, command, same_commands

# The element count of a key, by type (what --bigkeys reports; bytes for strings).
LENGTH_COMMANDS = {
    "string": "STRLEN",
    "list": "LLEN",
    "hash": "HLEN",
    "set": "SCARD",
    "zset": "ZCARD",
    "stream": "XLEN",
}


class _Protocol:
    """Pre-encoded commands; every command shape passes the read-only guard once, here.

    The guard's verdict depends only on the command and subcommand words, never on the key,
    so checking each shape once covers every key sent with it."""

    def __init__(self, scan_count: int, memory_samples: int | None, marker: bytes) -> None:
        usage: tuple[bytes, ...] = (b"MEMORY", b"USAGE", b"k")
        if memory_samples is not None:
            usage += (b"SAMPLES", b"%d" % memory_samples)
        shapes = [
            (b"SCAN", b"0", b"COUNT", b"%d" % scan_count),
            (b"SCAN", b"0", b"COUNT", b"%d" % scan_count, b"TYPE", b"string"),
            (b"TYPE", b"k"),
            usage,
            (b"OBJECT", b"ENCODING", b"k"),
            (b"ECHO", marker),
            (b"INFO", b"cpu"),
            *[(c.encode(), b"k") for c in LENGTH_COMMANDS.values()],
        ]
        for shape in shapes:
            check_read_only(shape)
        self.encoding = b"*3\r\n" + bulk(b"OBJECT") + bulk(b"ENCODING")
        self.type = b"*2\r\n" + bulk(b"TYPE")
        self.lengths = {t: b"*2\r\n" + bulk(c.encode()) for t, c in LENGTH_COMMANDS.items()}
        self.usage = b"*%d\r\n" % len(usage) + bulk(b"MEMORY") + bulk(b"USAGE")
        self.usage_tail = b"".join(bulk(w) for w in usage[3:])  # after the key: SAMPLES n
        self.marker = command(b"ECHO", marker)
        self.marker_reply = bulk(marker)
        self.info = command(b"INFO", b"cpu")

    def scan(
        self, cursor: bytes, count: int, types: tuple[str, ...] = (), plain: bool = True
    ) -> bytes:
        """SCAN cursor COUNT n (unless not `plain`), then SCAN cursor COUNT n TYPE t for each
        of `types`."""
        args = bulk(cursor) + bulk(b"COUNT") + bulk(b"%d" % count)
        head = b"*4\r\n$4\r\nSCAN\r\n" + args if plain else b""
        if not types:
            return head
        typed = b"*6\r\n$4\r\nSCAN\r\n" + args + b"$4\r\nTYPE\r\n"
        return head + b"".join(typed + bulk(t.encode()) for t in types)

    def usages(self, bulks: list[bytes]) -> bytes:
        """MEMORY USAGE for each key."""
        return same_commands(self.usage, bulks, self.usage_tail)


class _Reader(Reader):
    """The RESP reader, raising ScanError (the name a failed scan is recorded under)."""

    error = ScanError


@dataclass
class _Batch:
    """One SCAN batch and what is known of each key so far (columns, in SCAN order)."""

    keys: list[bytes]
    bulks: list[bytes] | None  # each key's RESP bulk, made once ("encoding"), or none kept
    encodings: list[str | None] = field(default_factory=list)
    types: list[str | None] = field(default_factory=list)
    usages: list[int | None] = field(default_factory=list)
    elements: list[int | None] | None = None  # None: no length command sent
    shared: list[int] = field(default_factory=list)  # positions of encodings several types share
    gone: set[int] = field(default_factory=set)  # positions of keys gone meanwhile

    def some_bulks(self, positions: list[int]) -> list[bytes]:
        """The RESP bulks of the keys at `positions`."""
        if self.bulks:
            return [self.bulks[i] for i in positions]
        return bulks_of([self.keys[i] for i in positions])


@dataclass
class _Ask:
    """One block of a round: one stage's commands for a batch, or for some of its keys."""

    stage: str  # encoding | main | length
    batch: _Batch
    commands: int
    heads: list[bytes] | None = None  # main: each key's length command (or TYPE)
    positions: list[int] | None = None  # length: the keys asked
    blocks: list[bytes] | None = None  # the commands, built when the ask was made
