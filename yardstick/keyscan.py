"""Key-space scan engine: SCAN, then the type, bytes and element count of every key (and the
encoding of a sample of them), pipelined on one connection, leaving no mark on the server, paced
to a share of its CPU.

No mark: no key's LRU/LFU clock moves and no error counter rises.
- SCAN (with or without TYPE), OBJECT ENCODING, TYPE and MEMORY USAGE never touch a key. Length
  commands (STRLEN, LLEN, …) do, unless the connection is `CLIENT NO-TOUCH ON` (Redis 7.2+,
  Valkey). Without it they are skipped (element counts NULL, the result says why) unless the
  caller allows touching; the result then counts the keys touched.
- A length command is chosen from the key's known type, never guessed: no WRONGTYPE.

Where a key's type comes from (`type_source`):
- "scan": each page is read by `SCAN cursor COUNT n TYPE t`, one for each type (string, hash,
  list, set, zset, stream), instead of one plain SCAN. The TYPE filter is applied to the keys
  of the buckets the page walks, so every typed SCAN from the same cursor walks the same
  buckets and returns the same next cursor: a page where a cursor differs (a table resized
  meanwhile) is read again by a plain SCAN, and TYPE asked for its keys. The plain SCAN is
  sent beside the typed ones where a module is loaded (its keys are in no typed page: TYPE
  asked), and once for the page where the key cap falls (its keys are cut in SCAN order).
  Used where the filter is cheap: Valkey and Redis 7.2+ (filtered while walking, ~0.1 µs per
  key for all the typed SCANs of a page, no keyspace hit in Valkey).
- "scan+type": Redis 6.0-7.1 look each walked key up again for every typed SCAN (~0.27 µs per
  key each, a keyspace hit each): beside the plain SCAN, only the most common type so far is
  scanned (when it holds at least TYPED_SCAN_MIN_SHARE of the keys), TYPE is asked for the
  others.
- "encoding" (before 6.0: no SCAN TYPE; or when asked): OBJECT ENCODING of every key, which
  names the type for most encodings, TYPE where the encoding is shared by several types.
Then each key needs its length command and MEMORY USAGE (2 commands; 1 without element
counts), the length command first: a key gone before it reads 0, and its MEMORY USAGE then reads
null, so it is dropped, not misread. OBJECT ENCODING is asked for every key of the first
ENCODING_FIRST_KEYS and then for one key in `encoding_every` (SCAN order is the hash table's:
a sample that favours no prefix or type), and at the end for the biggest keys by bytes and by
elements (the report's top keys): the result counts the encodings read.

A round is [SCAN (typed SCANs), OBJECT ENCODING of the sampled keys of the last page, marker,
the asks earlier replies made possible, marker, INFO cpu now and then], sent in one write; the
next round is sent as soon as this one's SCAN replies are read, so the server always has the
next round queued. A key's commands go in the round after its page ("scan"), or two rounds
after it for keys whose TYPE was asked.
Python's cost per key stays small: each key's RESP bulk (`$12\r\nuser:1:name\r\n`) is made at
most once and every command block is one join (a separator join where every key gets the
same command); a round's replies are split on CR LF in two sections (OBJECT ENCODING's bulks,
then the single-line replies: numbers, words, nils) and sliced; words and numbers are read
through dicts that remember them. A typed page's commands are built from the reply's own
bytes (its keys' bulks back to back) by one replace; its replies come back in the same order.
Nothing loops over keys in Python but for keys whose TYPE was asked and keys gone meanwhile;
duplicates (SCAN may return a key twice) are found once, at the end, with Arrow. Each round is
one write, and on a plain TCP socket the reader sleeps until the least its replies can weigh
has arrived (SO_RCVLOWAT): on a busy host every wakeup may wait for a time slice.

The budget is a share of the server's real CPU: INFO used_cpu_sys + used_cpu_user over wall
time, less the rate measured just before the scan (other clients), read on the scan's own
connection inside the pipeline (so that a reading covers exactly the rounds before it; where
the prober is on the server's host, /proc gives the same process's CPU as a check). The scan
waits so that its CPU stays under the share both since its start and over any sliding window
of PACING_WINDOW_S."""

from __future__ import annotations

import operator
import os
import re
import secrets
import socket
import time
from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import chain, compress, count, pairwise, repeat
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import redis

from yardstick import interrupt
from yardstick.guard import check_read_only
from yardstick.info import CommandStat, parse_commandstats, parse_info

# Commands whose INFO commandstats counters are the scan's own commands. Redis before 7.0
# counts MEMORY and OBJECT subcommands together under the container name.
OWN_COMMANDS = frozenset(
    {
        "scan",
        "type",
        "memory|usage",
        "memory",
        "object|encoding",
        "object",
        "strlen",
        "llen",
        "hlen",
        "scard",
        "zcard",
        "xlen",
    }
)
# The element count of a key, by type (what --bigkeys reports; bytes for strings).
LENGTH_COMMANDS = {
    "string": "STRLEN",
    "list": "LLEN",
    "hash": "HLEN",
    "set": "SCARD",
    "zset": "ZCARD",
    "stream": "XLEN",
}
# Encodings that name their type. The compact ones (listpack, ziplist, hashtable, and any
# encoding a later version adds) are shared by several types: TYPE is asked for those. "raw"
# is a string's, unless a module is loaded (a module value reports "raw" too).
ENCODING_TYPES = {
    "int": "string",
    "embstr": "string",
    "raw": "string",
    "quicklist": "list",
    "linkedlist": "list",
    "intset": "set",
    "skiplist": "zset",
    "stream": "stream",
}
# CLIENT NO-TOUCH exists from Redis 7.2 (Valkey reports redis_version 7.2.4). Before, sending
# it would add an error to the server's counters: the version decides whether it is tried.
NO_TOUCH_SINCE = (7, 2)
# SCAN's TYPE option exists from Redis 6.0 (before, sending it would be a syntax error). From
# 7.2 (and in Valkey) the filter is applied while walking, without a lookup: every type can be
# scanned for next to nothing. Before, each typed SCAN looks every walked key up again (and
# counts a keyspace hit): only a type holding this share of the keys is worth it (a lookup
# costs about 0.4 of a TYPE command there).
TYPED_SCAN_SINCE = (6, 0)
CHEAP_TYPE_FILTER_SINCE = (7, 2)
TYPED_SCAN_MIN_SHARE = 0.4
SCAN_TYPES = ("string", "hash", "list", "set", "zset", "stream")
# OBJECT ENCODING is read for every key of the first ENCODING_FIRST_KEYS taken, then for one in
# ENCODING_EVERY (and for the top keys at the end); encoding_every=1 reads every key's.
ENCODING_FIRST_KEYS = 4096
ENCODING_EVERY = 16
# Pacing reads the CPU counters at most this often (INFO costs server time too), except in
# the first rounds, where the cost of a command is still unknown.
PACING_INFO_INTERVAL_S = 0.1
PACING_EARLY_ROUNDS = 8
# No window this long holds more than the budget's share of the server's CPU (the share
# since the start is kept too: a scan held back earlier does not make up for it in a burst).
PACING_WINDOW_S = 1.0
# "Longest burst": the highest CPU share over consecutive readings at least this far apart.
BURST_WINDOW_S = 0.1
# Slow start: the first SCAN asks this many keys, doubling each round up to scan_count, so
# that no large round is sent before the cost of a command has been measured.
SLOW_START_KEYS = 32
RECV_BYTES = 1 << 20
# The most a read waits for before it wakes (SO_RCVLOWAT), below the socket's receive buffer.
LOW_WATER_BYTES = 64 << 10
SEND_BUFFER_BYTES = 4 << 20
# Distinct integer replies remembered (see _Ints); past this the cache starts again.
INT_CACHE_ENTRIES = 200_000
# Server CPU read from /proc (prober on the server's host) must agree this closely with INFO's
# to be taken as the same process.
PROC_AGREEMENT_S = 0.05

_CPU_RE = re.compile(r"^used_cpu_(?:sys|user):([0-9.]+)\s*$", re.MULTILINE)


class ScanError(redis.exceptions.RedisError):
    """The server answered SCAN with an error, or the reply stream made no sense."""


class _Incomplete(Exception):
    """The buffer does not yet hold the whole reply."""


@dataclass(frozen=True)
class ScanBudget:
    """What the scan may cost: keys sampled, a share of the server's CPU, wall time."""

    max_keys: int
    cpu_share: float
    max_wall_s: float


@dataclass
class ScanResult:
    """Every key sampled (columns; grouping by prefix is the caller's), how the scan ended,
    what it cost the server and what it did to the keys' clocks."""

    keys: list[bytes] = field(default_factory=list)
    types: list[str | None] = field(default_factory=list)
    encodings: list[str | None] = field(default_factory=list)
    elements: list[int | None] = field(default_factory=list)
    memory_usage_bytes: list[int | None] = field(default_factory=list)
    stop_reason: str = "complete"  # complete | key_cap | time_cap
    wall_s: float = 0.0
    paused_s: float = 0.0
    rounds: int = 0
    scan_calls: int = 0  # pages asked (each one plain SCAN, or typed SCANs, or both)
    commands: int = 0  # commands sent in the scan's rounds (markers and INFO included)
    duplicates: int = 0  # readings dropped: keys SCAN returned more than once (it may)
    vanished: int = 0  # keys gone between SCAN and their last command
    wrongtype: int = 0  # length commands answered WRONGTYPE: the key changed type meanwhile
    errors: Counter = field(default_factory=Counter)  # error replies per command
    first_error: str | None = None
    # What the scan did to the keys' LRU/LFU clocks: "no-touch" (CLIENT NO-TOUCH ON, element
    # counts read), "skipped" (no length command sent: elements NULL), "touched" (length
    # commands sent without NO-TOUCH: `keys_touched` clocks reset).
    touch_mode: str = "skipped"
    touch_note: str | None = None  # why CLIENT NO-TOUCH was not used
    keys_touched: int = 0
    # Lookups counted in INFO keyspace_hits/misses: TYPE, OBJECT ENCODING, length commands, and
    # before Redis 7.2 every key a typed SCAN walked (7.2+: each key it returned; Valkey: none).
    keyspace_lookups: int = 0
    # Where the types came from: scan (typed SCAN pages), scan+type (the most common type by a
    # typed SCAN, TYPE for the rest) or encoding (OBJECT ENCODING, TYPE where it is shared).
    type_source: str = "encoding"
    typed_scan_calls: int = 0  # SCAN ... TYPE t commands sent (scan_calls counts pages)
    type_fallback_pages: int = 0  # pages whose typed SCANs' cursors differed: TYPE asked
    encoding_every: int = 1  # after the first ENCODING_FIRST_KEYS, one key in this many
    encodings_read: int = 0  # keys whose OBJECT ENCODING was read (top keys included)
    server_version: str | None = None
    # The server's CPU (INFO used_cpu_sys + used_cpu_user, all clients) at the scan's start and
    # end; the rate before the scan, taken as other clients' and subtracted from the scan's.
    cpu_start_s: float | None = None
    cpu_end_s: float | None = None
    baseline_cpu_share: float | None = None
    baseline_window_s: float | None = None
    # The server process's CPU from /proc (prober on the server's host), over the scan.
    process_cpu_s: float | None = None
    # Highest share of the server's CPU the scan took over one burst window (≥ BURST_WINDOW_S
    # between two readings), that window's length, and the longest run of windows over budget.
    cpu_peak_share: float | None = None
    cpu_peak_window_s: float | None = None
    over_budget_longest_s: float | None = None
    own_before: list[CommandStat] = field(default_factory=list)
    own_after: list[CommandStat] = field(default_factory=list)

    @property
    def cpu_s(self) -> float | None:
        """Server CPU seconds the scan cost (its counters' difference less the baseline)."""
        if self.cpu_start_s is None or self.cpu_end_s is None:
            return None
        baseline = (self.baseline_cpu_share or 0.0) * self.wall_s
        return max(0.0, self.cpu_end_s - self.cpu_start_s - baseline)


def own_stats(client: redis.Redis) -> list[CommandStat]:
    """INFO commandstats counters of the scan's own commands."""
    return [s for s in parse_commandstats(client.info("commandstats")) if s.command in OWN_COMMANDS]


def own_usec(stats: list[CommandStat]) -> int:
    """Server microseconds spent in the scan's own commands (cumulative counter)."""
    return sum(s.usec for s in stats)


def info_cpu_s(text: str) -> float:
    """used_cpu_sys + used_cpu_user of an INFO reply: the server process's CPU seconds."""
    values = _CPU_RE.findall(text)
    if len(values) != 2:
        raise ScanError("INFO cpu has no used_cpu_sys/used_cpu_user")
    return float(values[0]) + float(values[1])


def process_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of process `pid`, from /proc: schedstat (nanoseconds)
    where the kernel keeps it, else stat (clock ticks)."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks.iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bulk(word: bytes) -> bytes:
    """RESP bulk string of a constant word."""
    return b"$%d\r\n%s\r\n" % (len(word), word)


def _command(*words: bytes) -> bytes:
    """RESP array of constant words."""
    return b"*%d\r\n" % len(words) + b"".join(_bulk(w) for w in words)


class _Words(dict):
    """Reply words as interned str (encodings repeat a million times); C-speed lookups."""

    def __missing__(self, word: bytes) -> str:
        text = self[word] = word.decode("utf-8", "backslashreplace")
        return text


class _LengthWords(dict):
    """`$12` by length, as a SCAN reply's key headers read once split on CR LF."""

    def __missing__(self, length: int) -> bytes:
        word = self[length] = b"$%d" % length
        return word


class _TypeWords(dict):
    """A TYPE reply line as the type's name ("string", a module's type name); "?" for an
    error reply (counted by the reader)."""

    def __missing__(self, line: bytes) -> str:
        if line[:1] != b"+":
            return "?"
        name = self[line] = line[1:].decode("utf-8", "backslashreplace")
        return name


class _EncodingPieces(dict):
    """An OBJECT ENCODING reply, as the piece its section splits into on CR LF `$` (`8\r\n
    listpack`), as the encoding's name; a null (`-1`: the key is gone) as ""."""

    def __missing__(self, piece: bytes) -> str:
        word = piece.partition(b"\r\n")[2]
        name = self[piece] = word.decode("utf-8", "backslashreplace") if word else ""
        return name


_LENGTH_WORDS = _LengthWords()
_WORDS = _Words()
_TYPES = _TypeWords()
_ENCODINGS = _EncodingPieces()


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
        self.encoding = b"*3\r\n" + _bulk(b"OBJECT") + _bulk(b"ENCODING")
        self.type = b"*2\r\n" + _bulk(b"TYPE")
        self.lengths = {t: b"*2\r\n" + _bulk(c.encode()) for t, c in LENGTH_COMMANDS.items()}
        self.usage = b"*%d\r\n" % len(usage) + _bulk(b"MEMORY") + _bulk(b"USAGE")
        self.usage_tail = b"".join(_bulk(w) for w in usage[3:])  # after the key: SAMPLES n
        self.marker = _command(b"ECHO", marker)
        self.marker_reply = _bulk(marker)
        self.info = _command(b"INFO", b"cpu")

    def scan(
        self, cursor: bytes, count: int, types: tuple[str, ...] = (), plain: bool = True
    ) -> bytes:
        """SCAN cursor COUNT n (unless not `plain`), then SCAN cursor COUNT n TYPE t for each
        of `types`."""
        args = _bulk(cursor) + _bulk(b"COUNT") + _bulk(b"%d" % count)
        head = b"*4\r\n$4\r\nSCAN\r\n" + args if plain else b""
        if not types:
            return head
        typed = b"*6\r\n$4\r\nSCAN\r\n" + args + b"$4\r\nTYPE\r\n"
        return head + b"".join(typed + _bulk(t.encode()) for t in types)

    @staticmethod
    def same(head: bytes, bulks: list[bytes], tail: bytes = b"") -> bytes:
        """One command for each key, the same: `head`, the key's bulk, `tail` (one separator
        join)."""
        return head + (tail + head).join(bulks) + tail if bulks else b""

    @staticmethod
    def own(heads: list[bytes], bulks: list[bytes]) -> bytes:
        """One command for each key, its own: `heads[i]` then the key's bulk."""
        return b"".join(chain.from_iterable(zip(heads, bulks, strict=True)))

    def usages(self, bulks: list[bytes]) -> bytes:
        """MEMORY USAGE for each key."""
        return self.same(self.usage, bulks, self.usage_tail)


class _Ints(dict):
    """Integer reply lines (`:123`) as int, cached: lengths and sizes repeat, and a dict
    lookup over a C iterator is the cheapest parse. A null (`$-1`) or a TYPE reply (`+hash`)
    reads None. Error lines read None too and are never cached: each one is kept in
    `errors` for the scan to count and attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[bytes] = []

    def __missing__(self, line: bytes) -> int | None:
        if line[:1] == b"-":
            self.errors.append(line)
            return None
        if len(self) >= INT_CACHE_ENTRIES:
            self.clear()
        value = self[line] = int(line[1:]) if line[:1] == b":" else None
        return value

    def parse(self, replies: list[bytes]) -> tuple[list[int | None], list[bytes]]:
        """The values of `replies`, and the error lines among them."""
        values = list(map(self.__getitem__, replies))
        errors, self.errors = self.errors, []
        return values, errors


class _Reader:
    """A byte buffer over the socket with the few RESP shapes the scan receives.

    On a plain TCP socket it sleeps until the least a round's replies can weigh has arrived
    (SO_RCVLOWAT), not at every piece the server writes: on a busy host each wakeup may wait
    for a time slice."""

    def __init__(self, sock, low_water: bool) -> None:
        self.sock = sock
        self.buf = b""
        self.pos = 0
        self.low_water = low_water
        self.expected = 0  # bytes the current round's replies weigh at least, still to come
        self.lowat = 1

    def expect(self, least_bytes: int) -> None:
        """The next round's replies weigh at least this much (buffered bytes count)."""
        self.expected = max(0, least_bytes - (len(self.buf) - self.pos))

    def fill(self) -> None:
        """Append whatever the socket has (blocking until something arrives)."""
        if self.low_water:
            lowat = max(1, min(self.expected, LOW_WATER_BYTES))
            if lowat != self.lowat:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
                self.lowat = lowat
        chunk = self.sock.recv(RECV_BYTES)
        if not chunk:
            raise redis.exceptions.ConnectionError("connection closed during the scan")
        self.expected = max(0, self.expected - len(chunk))
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0

    def close(self) -> None:
        """Give the socket back as it was found (it returns to the client's pool)."""
        if self.low_water and self.lowat != 1:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            self.lowat = 1

    def scan_reply(self) -> tuple[bytes, list[bytes], bytes | None]:
        """Read one SCAN reply: (next cursor, keys, their bulks as the reply holds them back
        to back, or None where a key holds CR LF)."""
        while True:
            try:
                return self._scan_reply()
            except _Incomplete:
                self.fill()

    def _scan_reply(self) -> tuple[bytes, list[bytes], bytes | None]:
        buf, p = self.buf, self.pos
        if buf[p : p + 1] == b"-":
            end = buf.find(b"\r\n", p)
            if end < 0:
                raise _Incomplete
            raise ScanError("SCAN: " + buf[p + 1 : end].decode("utf-8", "replace"))
        # *2 CRLF $n CRLF cursor CRLF *k CRLF, then k bulk strings.
        head = buf[p : p + 64].split(b"\r\n", 4)
        if len(head) < 5:
            if len(buf) - p < 64:
                raise _Incomplete
            raise ScanError(f"unexpected SCAN reply {buf[p : p + 40]!r}")
        if head[0] != b"*2" or head[3][:1] != b"*":
            raise ScanError(f"unexpected SCAN reply {buf[p : p + 40]!r}")
        cursor, count = head[2], int(head[3][1:])
        p += sum(map(len, head[:4])) + 8
        # Fast path: keys without CR LF split cleanly into header/key pairs; lengths verify it.
        parts = buf[p:].split(b"\r\n", 2 * count)
        if len(parts) == 2 * count + 1:
            heads, keys = parts[0 : 2 * count : 2], parts[1 : 2 * count : 2]
            # A CR LF inside a key shifts the pieces: the header before it then disagrees.
            if heads == list(map(_LENGTH_WORDS.__getitem__, map(len, keys))):
                self.pos = p + sum(map(len, heads)) + sum(map(len, keys)) + 4 * count
                return cursor, keys, buf[p : self.pos]
        keys = []
        for _ in range(count):  # binary-safe walk: a key may hold CR LF
            end = buf.find(b"\r\n", p)
            if end < 0:
                raise _Incomplete
            n = int(buf[p + 1 : end])
            start, p = end + 2, end + 4 + n
            if p > len(buf):
                raise _Incomplete
            keys.append(buf[start : start + n])
        self.pos = p
        return cursor, keys, None

    def until_marker(self, marker_reply: bytes) -> bytes:
        """Every reply before the marker's echo, unparsed (see `lines`)."""
        while True:
            end = self.buf.find(marker_reply, self.pos)
            if end >= 0:
                section = self.buf[self.pos : end]
                self.pos = end + len(marker_reply)
                return section
            self.fill()

    def bulk_text(self) -> str:
        """One bulk string reply (INFO), as text."""
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                if self.buf[self.pos : self.pos + 1] != b"$":
                    raise ScanError(f"unexpected reply {self.buf[self.pos : end][:60]!r}")
                n = int(self.buf[self.pos + 1 : end])
                if len(self.buf) >= end + 4 + n:
                    text = self.buf[end + 2 : end + 2 + n].decode("utf-8", "replace")
                    self.pos = end + 4 + n
                    return text
            self.fill()


def _block(head: bytes, keys: list[bytes], region: bytes | None, tail: bytes = b"") -> bytes:
    """One command for each key, the same: `head`, the key's bulk, `tail`. From `region`, the
    keys' bulks as a SCAN reply held them back to back, by one replace at C speed where no key
    starts with `$` (the boundaries are then exactly the CR LF `$` in it)."""
    if region is not None and region.count(b"\r\n$") == len(keys) - 1:
        return head + region.replace(b"\r\n$", b"\r\n" + tail + head + b"$") + tail
    return _Protocol.same(head, _bulks(keys), tail)


def _bulks(keys: list[bytes], heads: list[bytes] | None = None) -> list[bytes]:
    """Each key's RESP bulk string (`$12\r\nuser:1:name\r\n`), from its `$12` when known."""
    if heads is None:
        heads = list(map(_LENGTH_WORDS.__getitem__, map(len, keys)))
    return list(map(b"".join, zip(heads, repeat(b"\r\n"), keys, repeat(b"\r\n"))))


def lines(section: bytes) -> list[bytes]:
    """The lines of replies holding no binary data (words, numbers, errors), so that
    splitting on CR LF is safe."""
    pieces = section.split(b"\r\n")
    pieces.pop()  # the empty piece after the last CR LF
    return pieces


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
        return _bulks([self.keys[i] for i in positions])


@dataclass
class _Ask:
    """One block of a round: one stage's commands for a batch, or for some of its keys."""

    stage: str  # encoding | main | length
    batch: _Batch
    commands: int
    heads: list[bytes] | None = None  # main: each key's length command (or TYPE)
    positions: list[int] | None = None  # length: the keys asked
    blocks: list[bytes] | None = None  # the commands, built when the ask was made


@dataclass
class _Pacer:
    """Keeps the scan's CPU (the server's, less the baseline rate) within its share of the
    wall time since the start and of every sliding window."""

    share: float
    baseline_share: float
    start: float
    cpu_start_s: float
    times: list[float] = field(default_factory=list)  # readings: when
    own_s: list[float] = field(default_factory=list)  # the scan's CPU seconds by then
    covered: list[int] = field(default_factory=list)  # commands that reading covers
    commands_sent: int = 0
    last_info: float = float("-inf")
    rounds: int = 0

    def __post_init__(self) -> None:
        self.record(self.start, self.cpu_start_s, 0)

    def record(self, t: float, cpu_s: float, commands: int) -> None:
        """One reading of the server's CPU counters, covering `commands` sent so far."""
        own = cpu_s - self.cpu_start_s - self.baseline_share * (t - self.start)
        self.times.append(t)
        self.own_s.append(max(own, self.own_s[-1] if self.own_s else 0.0))
        self.covered.append(commands)

    def pause_s(self, now: float, commands_next: int) -> float:
        """How long to wait before sending a round of `commands_next` commands: what is
        known, plus the commands not yet covered at the cost per command measured so far."""
        own, covered = self.own_s[-1], self.covered[-1]
        per_command = own / covered if covered else 0.0
        projected = own + per_command * (self.commands_sent + commands_next - covered)
        ready = self.start + projected / self.share  # the share since the start
        excess = projected - self.share * PACING_WINDOW_S
        if excess > 0:  # the window ending at the send holds at most share × window
            i = bisect_left(self.own_s, excess)
            if i == len(self.own_s):
                reached = self.times[-1] + (excess - self.own_s[-1]) / self.share
            elif i == 0 or self.own_s[i] == self.own_s[i - 1]:
                reached = self.times[i]
            else:
                t0, t1, c0, c1 = self.times[i - 1], self.times[i], self.own_s[i - 1], self.own_s[i]
                reached = t0 + (excess - c0) / (c1 - c0) * (t1 - t0)
            ready = max(ready, reached + PACING_WINDOW_S)
        return ready - now

    def wants_info(self, now: float) -> bool:
        """Whether this round should read the counters."""
        if self.rounds < PACING_EARLY_ROUNDS or now - self.last_info >= PACING_INFO_INTERVAL_S:
            self.last_info = now
            return True
        return False

    def scan_count(self, limit: int) -> int:
        """COUNT for the next SCAN: small at first, doubling up to `limit`."""
        return min(limit, SLOW_START_KEYS << min(self.rounds, 20))

    def bursts(self) -> tuple[float | None, float | None, float | None]:
        """(highest CPU share over one burst window, that window's length, longest run of
        consecutive windows over the share) from the readings. A window runs from one reading
        to the first at least BURST_WINDOW_S later; a shorter tail joins the last window."""
        cuts = [0]
        for j in range(1, len(self.times)):
            if self.times[j] - self.times[cuts[-1]] >= BURST_WINDOW_S:
                cuts.append(j)
        if cuts[-1] != len(self.times) - 1:
            if len(cuts) > 1:
                cuts[-1] = len(self.times) - 1
            else:
                cuts.append(len(self.times) - 1)
        windows = []
        for i, j in pairwise(cuts):
            span = self.times[j] - self.times[i]
            if span > 0:
                windows.append((span, (self.own_s[j] - self.own_s[i]) / span))
        if not windows:
            return None, None, None
        peak_span, peak = max(windows, key=lambda w: w[1])
        longest = run = 0.0
        for span, share in windows:
            run = run + span if share > self.share else 0.0
            longest = max(longest, run)
        return peak, peak_span, longest


class _Scan:
    """The state of one scan: batches, and asks waiting to be sent.

    `type_source`: "scan" (a typed SCAN for every type), "scan+type" (a plain SCAN, and a
    typed one for the most common type only, when common enough) or "encoding" (see the
    module's docstring). `modules`: a module is loaded (its types are in no typed page)."""

    def __init__(
        self,
        proto: _Protocol,
        result: ScanResult,
        lengths: bool,
        raw_is_string: bool,
        type_source: str = "encoding",
        encoding_every: int = ENCODING_EVERY,
        walk_lookups: str = "none",
    ) -> None:
        self.proto, self.result, self.lengths = proto, result, lengths
        self.encoding_types = dict(ENCODING_TYPES)
        if not raw_is_string:
            del self.encoding_types["raw"]
        self.modules = not raw_is_string
        # Stage 2's first command by the type the encoding named; TYPE where it named none.
        self.heads: dict[str | None, bytes] = {None: proto.type, **proto.lengths}
        self.ints = _Ints()
        self.batches: list[_Batch] = []
        self.queued: list[_Ask] = []
        self.type_source = type_source
        self.encoding_every = max(1, encoding_every)
        # Keyspace lookups a typed SCAN costs: "walked" (before 7.2: every key of the page, for
        # each typed SCAN), "returned" (Redis 7.2+: each key it returns), "none" (Valkey).
        self.walk_lookups = walk_lookups
        self.taken = 0  # keys added so far (their position in SCAN order)
        self.type_counts: Counter = Counter({"string": 1})  # keys per type, from typed pages

    def scan_types(self) -> tuple[str, ...]:
        """The typed SCANs of the next page: every type ("scan"), or for "scan+type" only the
        most common one so far if it holds TYPED_SCAN_MIN_SHARE of the keys."""
        if self.type_source == "encoding":
            return ()
        if self.type_source == "scan+type":  # (a module's type, or "?", is never scanned)
            total = sum(self.type_counts.values())
            common, n = max((self.type_counts[t], t) for t in SCAN_TYPES)[::-1]
            return (common,) if n >= TYPED_SCAN_MIN_SHARE * total else ()
        return SCAN_TYPES

    def wants_plain(self) -> bool:
        """Whether a page needs the plain SCAN beside its typed ones: for the keys in no typed
        page (TYPE asked), where the typed pages do not cover every type a key may have."""
        return self.type_source != "scan" or self.modules

    def add_batch(self, keys: list[bytes], bulks: list[bytes]) -> None:
        """A SCAN page ("encoding"): OBJECT ENCODING queued for its keys (kept in SCAN order:
        the server's cache likes it), which will name most keys' types."""
        batch = _Batch(keys, bulks)
        self.batches.append(batch)
        self.taken += len(keys)
        self.queued.append(_Ask("encoding", batch, len(keys)))

    def add_pages(
        self, pages: list[tuple[str, list[bytes], bytes | None]], plain: list[bytes] | None
    ) -> None:
        """A page whose types came from typed SCANs: `pages` holds (type, keys, the keys' raw
        bulks as the reply held them, or None) for each type, `plain` the page's keys (None
        where the typed pages cover every type). The batch holds each typed page's keys in
        turn (their commands are built from the reply's bytes at C speed), then the keys in no
        typed page (type unknown: TYPE asked). The sampled keys' OBJECT ENCODING, and each key's
        length command and MEMORY USAGE are queued."""
        proto, result = self.proto, self.result
        keys: list[bytes] = []
        types: list[str | None] = []
        lengths: list[bytes] = []  # command blocks, in batch order
        usages: list[bytes] = []
        for kind, page, region in pages:
            self.type_counts[kind] += len(page)
            if self.walk_lookups == "walked":  # each typed SCAN looked up every walked key
                result.keyspace_lookups += len(plain) if plain is not None else 0
            elif self.walk_lookups == "returned":
                result.keyspace_lookups += len(page)
            if not page:
                continue
            keys += page
            types += [kind] * len(page)
            if self.lengths:
                lengths.append(_block(proto.lengths[kind], page, region))
            usages.append(_block(proto.usage, page, region, proto.usage_tail))
        if self.walk_lookups == "walked" and plain is None:
            result.keyspace_lookups += len(keys) * len(pages)
        rest = [] if plain is None else list(set(plain).difference(*(p for _, p, _ in pages)))
        batch = _Batch(keys, None)
        if rest:
            first = len(keys)
            keys += rest
            types += [None] * len(rest)
            batch.shared = list(range(first, len(keys)))
            bulks = _bulks(rest)
            head = proto.same(proto.type, bulks)
            if self.lengths:
                lengths.append(head)
            usages.append(proto.usages(bulks))
            if not self.lengths:
                usages.append(head)
        batch.types = types
        n = len(keys)
        batch.encodings = [None] * n
        self.batches.append(batch)
        first, self.taken = self.taken, self.taken + n
        every = self.encoding_every
        if every == 1:
            sample = list(range(n))
        else:
            head_n = max(0, min(n, ENCODING_FIRST_KEYS - first))
            start = (-first) % every  # the first position of the batch on the 1-in-`every` grid
            if start < head_n:
                start += (head_n - start + every - 1) // every * every
            sample = [*range(head_n), *range(start, n, every)]
        if sample:
            self.queued.append(_Ask("encoding", batch, len(sample), positions=sample))
        commands = 2 * n if self.lengths else n + len(rest)
        blocks = [*lengths, *usages]
        self.queued.append(
            _Ask("main", batch, commands, heads=[] if self.lengths else None, blocks=blocks)
        )

    def _queue_main(self, batch: _Batch) -> None:
        """Each key's [length command, or TYPE where its type is unknown], then MEMORY USAGE;
        without element counts, MEMORY USAGE then TYPE where unknown."""
        n = len(batch.keys)
        if self.lengths:
            heads = list(map(self.heads.__getitem__, batch.types))
            self.queued.append(_Ask("main", batch, 2 * n, heads=heads))
        else:
            self.queued.append(_Ask("main", batch, n + len(batch.shared)))

    def take(self) -> tuple[_Ask | None, list[_Ask]]:
        """The asks of the next round: at most one OBJECT ENCODING ask (its replies are a
        section of their own), and every ask whose replies are single lines."""
        encoding = next((a for a in self.queued if a.stage == "encoding"), None)
        fixed = [a for a in self.queued if a.stage != "encoding"]
        self.queued = [a for a in self.queued if a.stage == "encoding" and a is not encoding]
        return encoding, fixed

    def encode(self, ask: _Ask) -> list[bytes]:
        """The commands of one ask.

        A key's length command always goes before its MEMORY USAGE: a key gone before the
        length command reads 0, and its MEMORY USAGE then reads null (dropped, not misread)."""
        batch, proto = ask.batch, self.proto
        if ask.blocks is not None:
            return ask.blocks
        if ask.stage == "encoding":
            if ask.positions is None:
                return [proto.same(proto.encoding, batch.bulks)]
            return [proto.same(proto.encoding, batch.some_bulks(ask.positions))]
        if ask.stage == "length":
            bulks = batch.some_bulks(ask.positions)
            return [proto.own([proto.lengths[batch.types[i]] for i in ask.positions], bulks)]
        if ask.heads is not None:  # [length command or TYPE], then MEMORY USAGE
            return [proto.own(ask.heads, batch.bulks), proto.usages(batch.bulks)]
        # Lengths skipped: MEMORY USAGE, then TYPE where the type is not known yet.
        shared = [batch.bulks[i] for i in batch.shared]
        return [proto.usages(batch.bulks), proto.same(proto.type, shared)]

    def read_encodings(self, ask: _Ask, section: bytes) -> None:
        """OBJECT ENCODING replies: of a sample of a batch's keys (stored), or ("encoding") of
        all of them, naming the type where the encoding names it, and stage 2 queued."""
        batch = ask.batch
        encodings = self._parse_encodings(ask.commands, section)
        if ask.positions is not None:  # a sample: "" (gone) and errors stay unknown
            stored = batch.encodings
            for i, encoding in zip(ask.positions, encodings, strict=True):
                stored[i] = encoding or None
            return
        batch.encodings = encodings
        batch.types = list(map(self.encoding_types.get, batch.encodings))
        if None in batch.types:
            if "" in batch.encodings:  # a null: gone between SCAN and OBJECT ENCODING
                for i, encoding in enumerate(batch.encodings):
                    if encoding == "":
                        batch.gone.add(i)
                        batch.encodings[i] = None
            nameless = map(operator.is_, batch.types, repeat(None))
            batch.shared = [i for i in compress(count(), nameless) if i not in batch.gone]
        self._queue_main(batch)

    def _parse_encodings(self, n: int, section: bytes) -> list[str | None]:
        """`n` OBJECT ENCODING replies: names, "" for a null (gone), None for an error."""
        self.result.keyspace_lookups += n
        pieces = (b"\r\n" + section[:-2]).split(b"\r\n$")
        if len(pieces) == n + 1 and section[:1] != b"-" and b"\r\n-" not in section:
            return list(map(_ENCODINGS.__getitem__, pieces[1:]))
        # An error reply (an ACL may forbid OBJECT ENCODING): line by line.
        return self._encodings_walked(n, lines(section))

    def top_encodings(self, top_keys: int, sock, reader: _Reader) -> None:
        """After `collect`: read the OBJECT ENCODING not yet read of the `top_keys` biggest
        keys by bytes and by elements (aggregates), ranked as the report ranks them (ties by
        key name), so that its top keys all show one."""
        result = self.result
        n = len(result.keys)
        if n == 0:
            return
        wanted = set(_top(pa.array(result.memory_usage_bytes, pa.int64()), result.keys, top_keys))
        if result.touch_mode != "skipped":  # aggregates only: a string's "elements" are bytes
            strings = pc.equal(pa.array(result.types, pa.string()), "string")
            elements = pa.array(result.elements, pa.int64())
            aggregates = pc.if_else(strings, pa.scalar(None, pa.int64()), elements)
            wanted.update(_top(aggregates, result.keys, top_keys))
        positions = sorted(i for i in wanted if result.encodings[i] is None)
        if not positions:
            return
        proto = self.proto
        bulks = _bulks([result.keys[i] for i in positions])
        sock.sendall(proto.same(proto.encoding, bulks) + proto.marker)
        reader.expect(5 * len(positions) + len(proto.marker_reply))
        encodings = self._parse_encodings(len(positions), reader.until_marker(proto.marker_reply))
        for i, encoding in zip(positions, encodings, strict=True):
            result.encodings[i] = encoding or None
        result.commands += len(positions) + 1

    def _encodings_walked(self, n: int, replies: list[bytes]) -> list[str | None]:
        encodings: list[str | None] = []
        at = 0
        for _ in range(n):
            line = replies[at]
            if line == b"$-1":
                encodings.append("")
                at += 1
            elif line[:1] == b"-":  # unknown: TYPE will be asked
                self._error("OBJECT ENCODING", line)
                encodings.append(None)
                at += 1
            else:
                encodings.append(_WORDS.__getitem__(replies[at + 1]))
                at += 2
        if at != len(replies):
            raise ScanError("reply stream out of step with the commands sent")
        return encodings

    def read(self, ask: _Ask, replies: list[bytes]) -> None:
        """Store the single-line replies of one ask and queue what they make possible."""
        if ask.stage == "main":
            self._read_main(ask, replies)
        else:
            self._read_lengths(ask.batch, ask.positions, replies)

    def _read_main(self, ask: _Ask, replies: list[bytes]) -> None:
        batch = ask.batch
        n = len(batch.keys)
        if ask.heads is None:
            usage_lines, type_lines = replies[:n], replies[n:]
        else:
            first, usage_lines = replies[:n], replies[n:]
        batch.usages, errors = self.ints.parse(usage_lines)
        for line in errors:
            self._error("MEMORY USAGE", line)
        if None in batch.usages:
            batch.gone.update(i for i, line in enumerate(usage_lines) if line == b"$-1")
        if ask.heads is None:
            self.result.keyspace_lookups += len(type_lines)
            self._store_types(batch, type_lines)
            batch.bulks = []  # nothing more to send for this batch
            return
        self.result.keyspace_lookups += n
        batch.elements, errors = self.ints.parse(first)  # TYPE replies read None
        if errors:  # which command: the key's length command, or TYPE
            for i, line in enumerate(first):
                if line[:1] == b"-":
                    self.result.wrongtype += line.startswith(b"-WRONGTYPE")
                    self._error(LENGTH_COMMANDS.get(batch.types[i] or "", "TYPE"), line)
        if batch.shared:
            self._store_types(batch, [first[i] for i in batch.shared])
            types, gone = batch.types, batch.gone
            want = [i for i in batch.shared if types[i] in LENGTH_COMMANDS and i not in gone]
            if want:
                self.queued.append(_Ask("length", batch, len(want), positions=want))
                return
        batch.bulks = []  # nothing more to send for this batch

    def _store_types(self, batch: _Batch, type_lines: list[bytes]) -> None:
        """TYPE replies of the keys whose encoding several types share."""
        names = list(map(_TYPES.__getitem__, type_lines))
        self.type_counts.update(names)  # with the typed pages': the most common type so far
        types = batch.types
        for i, name in zip(batch.shared, names, strict=True):
            types[i] = name
        if "?" in names or "none" in names:
            for i, name, line in zip(batch.shared, names, type_lines, strict=True):
                if name == "?":
                    self._error("TYPE", line)
                    types[i] = None
                elif name == "none":  # gone since OBJECT ENCODING
                    batch.gone.add(i)

    def _read_lengths(self, batch: _Batch, positions: list[int], replies: list[bytes]) -> None:
        self.result.keyspace_lookups += len(positions)
        batch.bulks = []  # nothing more to send for this batch
        values, errors = self.ints.parse(replies)
        elements, types = batch.elements, batch.types
        for i, value in zip(positions, values, strict=True):
            elements[i] = value
        if errors or 0 in values:
            for i, value, line in zip(positions, values, replies, strict=True):
                if value is None and line[:1] == b"-":
                    self.result.wrongtype += line.startswith(b"-WRONGTYPE")
                    self._error(LENGTH_COMMANDS[types[i]], line)
                # An aggregate that exists is never empty (a stream may be): 0 means gone.
                elif value == 0 and types[i] != "stream":
                    batch.gone.add(i)

    def _error(self, command: str, line: bytes) -> None:
        """Count an error reply (an ACL may forbid one command); keep the first one's text."""
        self.result.errors[command] += 1
        if self.result.first_error is None:
            self.result.first_error = f"{command}: {line[1:].decode('utf-8', 'replace')}"

    def collect(self) -> None:
        """Concatenate the batches into the result's columns, dropping keys that vanished."""
        result = self.result
        for batch in self.batches:
            n = len(batch.keys)
            elements = batch.elements if batch.elements is not None else [None] * n
            columns = (batch.keys, batch.types, batch.encodings, batch.usages, elements)
            if batch.gone:
                keep = [i not in batch.gone for i in range(n)]
                columns = tuple(list(compress(c, keep)) for c in columns)
                result.vanished += n - len(columns[0])
            keys, types, encodings, usages, elements = columns
            result.keys += keys
            result.types += types
            result.encodings += encodings
            result.memory_usage_bytes += usages
            result.elements += elements
            if result.touch_mode == "touched" and batch.elements is not None:
                result.keys_touched += len(elements) - elements.count(None)
        self._drop_duplicates()

    def _drop_duplicates(self) -> None:
        """Keep the first reading of a key SCAN returned twice (its guarantee allows it while
        the server resizes its table). Counted once, vectorized: no per-key set in the loop."""
        result = self.result
        distinct = len(pc.unique(pa.array(result.keys, pa.binary())))  # 4× count_distinct's speed
        if distinct == len(result.keys):
            return
        seen: set[bytes] = set()
        keep = [not (k in seen or seen.add(k)) for k in result.keys]
        result.duplicates = len(keep) - distinct
        for name in ("keys", "types", "encodings", "memory_usage_bytes", "elements"):
            setattr(result, name, list(compress(getattr(result, name), keep)))


def _top(values: pa.Array, keys: list[bytes], k: int) -> list[int]:
    """Positions of the `k` largest values (nulls never), ties by key: the report's ranking."""
    if values.null_count == len(values) or k <= 0:
        return []
    kth = pc.select_k_unstable(values, k, sort_keys=[("dummy", "descending")])
    floor = min(v for v in values.take(kth).to_pylist() if v is not None)
    candidates = pc.indices_nonzero(pc.greater_equal(values, floor)).to_pylist()
    chosen = values.take(pa.array(candidates, pa.int64())).to_pylist()
    ranked = sorted(zip(candidates, chosen, strict=True), key=lambda c: (-c[1], keys[c[0]]))
    return [i for i, _ in ranked[:k]]


def _version(text: str) -> tuple[int, ...]:
    """`7.2.4` as (7, 2, 4); what does not parse as (0,)."""
    try:
        return tuple(int(p) for p in text.split("."))
    except ValueError:
        return (0,)


def _ask(conn, *args: str) -> object:
    """One command on the scan's connection (through the read-only guard) and its reply."""
    conn.send_command(*args)
    return conn.read_response()


def _text(reply: object) -> str:
    """A reply as text, whatever the client's decoding."""
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)


def scan_keyspace(
    client: redis.Redis,
    budget: ScanBudget,
    scan_count: int = 1000,
    memory_samples: int | None = None,
    allow_touch: bool = False,
    baseline_s: float = 0.5,
    on_server_host: bool = False,
    type_source: str = "auto",
    encoding_every: int | None = None,
    top_keys: int = 0,
) -> ScanResult:
    """SCAN the client's database and read each key's type, bytes and length, and the
    encoding of a sample, within `budget`; stops cleanly at the key or time cap. Keys come in
    no particular order (SCAN's).

    Length commands are sent with CLIENT NO-TOUCH ON where the server has it; elsewhere only
    when `allow_touch` (each key's LRU/LFU clock is then reset, and counted). `baseline_s`:
    how long the server's CPU rate is read before the scan (other clients' share).
    `on_server_host`: the server's process is this machine's (its CPU is read from /proc too).
    `type_source`: "auto" (by the server: see the module's docstring), "scan", "scan+type" or
    "encoding" (every key's OBJECT ENCODING; `encoding_every` is then 1). `encoding_every`:
    after the first ENCODING_FIRST_KEYS keys, one key's OBJECT ENCODING in this many (None:
    ENCODING_EVERY).
    `top_keys`: the encodings of this many biggest keys by bytes and by elements are read at
    the end (the report's top keys).
    `client` comes from yardstick.connect.open_client (INFO as text)."""
    marker = b"yardstick-scan-" + secrets.token_hex(8).encode()
    proto = _Protocol(scan_count, memory_samples, marker)
    result = ScanResult()
    taken = 0  # keys taken from SCAN replies (a key SCAN returned twice counts twice)
    result.own_before = own_stats(client)
    conn = client.connection_pool.get_connection()
    no_touch = False
    try:
        conn.connect()
        server = parse_info(_text(_ask(conn, "INFO", "server"))).get("server", {})
        result.server_version = server.get("redis_version")
        modules = parse_info(_text(_ask(conn, "INFO", "modules"))).get("modules", {})
        version = _version(result.server_version or "0")
        if version >= NO_TOUCH_SINCE:
            try:
                _ask(conn, "CLIENT", "NO-TOUCH", "ON")
                no_touch = True
            except redis.exceptions.ResponseError as exc:  # an ACL without +client|no-touch
                result.errors["CLIENT NO-TOUCH"] += 1
                result.first_error = result.first_error or f"CLIENT NO-TOUCH: {exc}"
                result.touch_note = f"CLIENT NO-TOUCH refused: {exc}"
        else:
            result.touch_note = (
                f"Redis {result.server_version} has no CLIENT NO-TOUCH (7.2 and later)"
            )
        if no_touch:
            result.touch_mode = "no-touch"
        else:
            result.touch_mode = "touched" if allow_touch else "skipped"
        valkey = "valkey_version" in server or server.get("server_name") == "valkey"
        if type_source == "auto":
            if version < TYPED_SCAN_SINCE:
                type_source = "encoding"
            elif valkey or version >= CHEAP_TYPE_FILTER_SINCE:
                type_source = "scan"
            else:
                type_source = "scan+type"
        if encoding_every is None:
            encoding_every = ENCODING_EVERY
        if type_source == "encoding":
            encoding_every = 1
        walk_lookups = (
            "none" if valkey else "returned" if version >= CHEAP_TYPE_FILTER_SINCE else "walked"
        )
        result.type_source, result.encoding_every = type_source, max(1, encoding_every)
        scan = _Scan(
            proto,
            result,
            result.touch_mode != "skipped",
            raw_is_string=not modules,
            type_source=type_source,
            encoding_every=encoding_every,
            walk_lookups=walk_lookups,
        )
        pid = int(server.get("process_id", 0) or 0) if on_server_host else 0

        # Other clients' CPU share, just before the scan: subtracted from what the scan costs.
        # (Without a window, none: two INFO calls back to back would read mostly their own.)
        cpu0, t0 = info_cpu_s(_text(_ask(conn, "INFO", "cpu"))), time.perf_counter()
        cpu1, t1 = cpu0, t0
        if baseline_s > 0:
            interrupt.sleep(baseline_s)
            cpu1, t1 = info_cpu_s(_text(_ask(conn, "INFO", "cpu"))), time.perf_counter()
        result.baseline_window_s = t1 - t0
        result.baseline_cpu_share = max(0.0, (cpu1 - cpu0) / (t1 - t0)) if t1 > t0 else 0.0
        proc_start = _process_cpu_matching(pid, cpu1) if pid else None

        sock = conn._sock  # noqa: SLF001 - the pipelined scan writes pre-encoded rounds
        # Room for a whole round: sendall returns at once and the client parses the last
        # round while the server reads this one (the kernel caps it at wmem_max).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        reader = _Reader(sock, low_water=type(sock) is socket.socket)
        start = time.perf_counter()
        result.cpu_start_s = cpu1
        pacer = _Pacer(budget.cpu_share, result.baseline_cpu_share, start, cpu1)
        cursor: bytes | None = b"0"  # the next page's cursor; None once no page is asked
        # A page read again by a plain SCAN from the same cursor (next round): to cut it in
        # SCAN order at the key cap, or because its typed SCANs' next cursors differed.
        again: dict | None = None
        inflight: deque[tuple] = deque()

        def wants_round() -> bool:
            return (
                cursor is not None or bool(scan.queued) or (again is not None and not again["sent"])
            )

        def send_round() -> None:
            encoding, fixed = scan.take()
            asks = fixed if encoding is None else [encoding, *fixed]
            commands = sum(ask.commands for ask in asks) + 2  # + the two markers
            info = pacer.wants_info(time.perf_counter())
            page = None  # (kind, cursor, COUNT, types, plain SCAN too)
            if again is not None and not again["sent"]:
                again["sent"] = True
                page = ("again", again["cursor"], again["count"], (), True)
            elif cursor is not None:
                types = scan.scan_types()
                plain = scan.wants_plain() or not types
                page = ("page", cursor, pacer.scan_count(scan_count), types, plain)
            scans = 0 if page is None else page[4] + len(page[3])
            commands += info + scans
            pause_s = pacer.pause_s(time.perf_counter(), commands)
            interrupt.check()
            if pause_s > 0:
                interrupt.sleep(pause_s)
                result.paused_s += pause_s
            # SCAN(s) [OBJECT ENCODING] marker [single-line replies] marker [INFO], sent at
            # once. SCAN goes first: its reply comes back while the server still works on the
            # rest, and the next round (with the commands of the keys it returned) is queued
            # behind this one, so the server never waits for the client.
            pieces = [] if page is None else [proto.scan(*page[1:])]
            if encoding is not None:
                pieces += scan.encode(encoding)
            pieces.append(proto.marker)
            for ask in fixed:
                pieces += scan.encode(ask)
            pieces.append(proto.marker + proto.info if info else proto.marker)
            sock.sendall(b"".join(pieces))
            # The least its replies weigh, up to each marker: what the reader may sleep for.
            least_head = 15 * scans + len(proto.marker_reply)
            least_head += 5 * encoding.commands if encoding is not None else 0
            least_tail = 4 * sum(ask.commands for ask in fixed) + len(proto.marker_reply)
            pacer.commands_sent += commands
            pacer.rounds += 1
            inflight.append(
                (page, encoding, fixed, info, pacer.commands_sent, least_head, least_tail)
            )
            result.rounds += 1
            result.scan_calls += page is not None
            result.typed_scan_calls += 0 if page is None else len(page[3])
            result.commands += commands

        def go_on(next_cursor: bytes) -> None:
            """The next page's cursor, unless the scan is complete or out of time."""
            nonlocal cursor
            if next_cursor == b"0":
                cursor = None
            elif time.perf_counter() - start >= budget.max_wall_s:
                cursor, result.stop_reason = None, "time_cap"
            else:
                cursor = next_cursor

        def cut(keys: list[bytes], next_cursor: bytes) -> list[bytes]:
            """A plain page's keys within the key cap, and what comes next."""
            nonlocal cursor, taken
            room = budget.max_keys - taken
            if len(keys) > room or (len(keys) == room and next_cursor != b"0"):
                keys = keys[:room]
                cursor, result.stop_reason = None, "key_cap"
            else:
                go_on(next_cursor)
            taken += len(keys)
            return keys

        def take_page(page: tuple, plain: tuple | None, typed: list[tuple]) -> None:
            """One page's replies: the plain SCAN's (cursor, keys, raw bulks) or None, and the
            typed SCANs' (type, cursor, keys, raw bulks)."""
            nonlocal cursor, again, taken
            if scan.type_source == "encoding":
                keys = cut(plain[1], plain[0])
                if keys:
                    scan.add_batch(keys, _bulks(keys))
                return
            if page[0] == "again":
                held, again = again["pages"], None
                if held is None:  # its typed SCANs disagreed: every type asked with TYPE
                    keys = cut(plain[1], plain[0])
                    if keys:
                        scan.add_pages([], keys)
                    return
                keys = plain[1][: budget.max_keys - taken]  # the key cap, in SCAN order
                allowed = set(keys)
                taken += len(keys)
                scan.add_pages(
                    [(t, [k for k in ks if k in allowed], None) for t, ks, _ in held], keys
                )
                return
            cursors = {c for _, c, _, _ in typed} | ({plain[0]} if plain is not None else set())
            if len(cursors) > 1:  # not the same buckets (a table resized meanwhile)
                result.type_fallback_pages += 1
                if plain is not None:
                    keys = cut(plain[1], plain[0])
                    if keys:
                        scan.add_pages([], keys)
                else:
                    again = {"cursor": page[1], "count": page[2], "pages": None, "sent": False}
                    cursor = None
                return
            next_cursor = cursors.pop()
            pages = [(t, ks, region) for t, _, ks, region in typed]
            n = len(plain[1]) if plain is not None else sum(len(ks) for _, ks, _ in pages)
            room = budget.max_keys - taken
            if n > room or (n == room and next_cursor != b"0"):
                cursor, result.stop_reason = None, "key_cap"
                if plain is None:  # its order is needed: read it again without TYPE
                    again = {"cursor": page[1], "count": page[2], "pages": pages, "sent": False}
                    return
                keys = plain[1][:room]
                allowed = set(keys)
                taken += len(keys)
                scan.add_pages(
                    [(t, [k for k in ks if k in allowed], None) for t, ks, _ in pages], keys
                )
                return
            go_on(next_cursor)
            taken += n
            if n:
                scan.add_pages(pages, plain[1] if plain is not None else None)

        send_round()
        while inflight:
            page, encoding, fixed, info, commands_through, least_head, least_tail = (
                inflight.popleft()
            )
            reader.expect(least_head)
            if page is not None:
                plain = reader.scan_reply() if page[4] else None
                # The same page's keys of each type (the same buckets, so the same next cursor).
                typed = [(t, *reader.scan_reply()) for t in page[3]]
                take_page(page, plain, typed)
            # The server is still on this round: queue the next one behind it, then read on.
            if not inflight and wants_round():
                send_round()
            # Each section is read as soon as it is in, while the server works on the next.
            encodings = reader.until_marker(proto.marker_reply)
            if encoding is not None:
                scan.read_encodings(encoding, encodings)
            elif encodings:
                raise ScanError("reply stream out of step with the commands sent")
            reader.expect(least_tail)
            section = reader.until_marker(proto.marker_reply)
            if info:
                pacer.record(time.perf_counter(), info_cpu_s(reader.bulk_text()), commands_through)
            replies = lines(section)
            at = 0
            for ask in fixed:
                scan.read(ask, replies[at : at + ask.commands])
                at += ask.commands
            if at != len(replies):
                raise ScanError("reply stream out of step with the commands sent")
            if not inflight and wants_round():
                send_round()
        scan.collect()
        if top_keys > 0 and result.encoding_every > 1:
            scan.top_encodings(top_keys, sock, reader)
        reader.close()  # redis-py reads this connection again from here
        end_cpu = info_cpu_s(_text(_ask(conn, "INFO", "cpu")))
        end = time.perf_counter()
        pacer.record(end, end_cpu, pacer.commands_sent)
        result.wall_s, result.cpu_end_s = end - start, end_cpu
        if proc_start is not None:
            result.process_cpu_s = process_cpu_s(pid) - proc_start
        result.cpu_peak_share, result.cpu_peak_window_s, result.over_budget_longest_s = (
            pacer.bursts()
        )
        if no_touch:
            _ask(conn, "CLIENT", "NO-TOUCH", "OFF")  # the connection goes back to the pool
    except BaseException:
        # The connection may hold unread replies: never hand it back to the pool as is.
        conn.disconnect()
        raise
    finally:
        client.connection_pool.release(conn)
    result.own_after = own_stats(client)
    result.encodings_read = len(result.encodings) - result.encodings.count(None)
    return result


def _process_cpu_matching(pid: int, info_cpu: float) -> float | None:
    """The server process's CPU seconds from /proc, if process `pid` on this machine is the
    server (its CPU agrees with INFO's); None otherwise (another host, container, no /proc)."""
    try:
        proc = process_cpu_s(pid)
    except (OSError, ValueError, IndexError):
        return None
    return proc if abs(proc - info_cpu) <= PROC_AGREEMENT_S + 0.02 * info_cpu else None
