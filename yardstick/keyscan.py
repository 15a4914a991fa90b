"""Key-space scan engine: SCAN, then the element count, OBJECT ENCODING and MEMORY USAGE of
every key, pipelined on one connection and paced to a share of the server's time.

It does what `redis-cli --bigkeys` and `--memkeys` do in one pass, with fewer waits:
- one round trip carries a whole SCAN batch (redis-cli spends three per ten keys): a round
  is [the previous batch's per-key commands, SCAN], and the next round leaves, in pieces,
  as soon as its SCAN reply arrives, before the replies before it are parsed;
- a key's commands travel together, right after the SCAN that walked the key, so the server
  finds it in its cache; the length command (first: it reads the value) is guessed from the
  type last seen under the key's prefix and corrected when wrong (WRONGTYPE, then the
  encoding, or TYPE when the encoding is shared by several types);
- commands are built by joins over C iterators and replies holding no binary data are split
  on CR LF at once, so Python's cost per key stays small.

The tool's own server time is read from the INFO commandstats difference of its own
commands; the scan sleeps to keep that time under its share of the wall time."""

from __future__ import annotations

import secrets
import socket
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain, repeat

import redis

from yardstick import interrupt
from yardstick.guard import check_read_only
from yardstick.info import CommandStat, parse_commandstats

# Commands whose INFO commandstats counters are the scan's own cost. Redis before 7.0
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
# An encoding names its type, except the compact encodings several types share. A module
# type reports "raw" too: its STRLEN fails with WRONGTYPE and TYPE is asked instead.
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
# Pacing reads the counters at most this often (INFO costs server time too), except in
# the first rounds, where the cost per key is still unknown.
PACING_INFO_INTERVAL_S = 0.1
PACING_EARLY_ROUNDS = 8
# Slow start: the first SCAN asks this many keys, doubling each round up to scan_count, so
# that no large round is sent before the cost of a key has been measured.
SLOW_START_KEYS = 32
RECV_BYTES = 1 << 20
SEND_BUFFER_BYTES = 4 << 20
# A round's probes leave in pieces of this many keys, so the server starts on the first
# while the client encodes the next.
PROBE_CHUNK_KEYS = 200


class ScanError(redis.exceptions.RedisError):
    """The server answered SCAN with an error, or the reply stream made no sense."""


class _Incomplete(Exception):
    """The buffer does not yet hold the whole reply."""


@dataclass(frozen=True)
class ScanBudget:
    """What the scan may cost: keys sampled, the server's busy share, wall time."""

    max_keys: int
    busy_share: float
    max_wall_s: float


@dataclass
class ScanResult:
    """Every key sampled (columns), how the scan ended, and what it cost the server."""

    keys: list[bytes] = field(default_factory=list)
    prefixes: list[bytes] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    encodings: list[str | None] = field(default_factory=list)
    elements: list[int | None] = field(default_factory=list)
    memory_usage_bytes: list[int | None] = field(default_factory=list)
    stop_reason: str = "complete"  # complete | key_cap | time_cap
    wall_s: float = 0.0
    paused_s: float = 0.0
    rounds: int = 0
    scan_calls: int = 0
    duplicates: int = 0  # keys SCAN returned more than once (its guarantee allows it)
    vanished: int = 0  # keys gone between SCAN and the per-key commands
    guesses_wrong: int = 0  # length commands sent for the wrong type, then corrected
    errors: Counter = field(default_factory=Counter)  # error replies per command
    first_error: str | None = None
    own_before: list[CommandStat] = field(default_factory=list)
    own_after: list[CommandStat] = field(default_factory=list)


def own_stats(client: redis.Redis) -> list[CommandStat]:
    """INFO commandstats counters of the scan's own commands."""
    return [s for s in parse_commandstats(client.info("commandstats")) if s.command in OWN_COMMANDS]


def own_usec(stats: list[CommandStat]) -> int:
    """Server microseconds spent in the scan's own commands (cumulative counter)."""
    return sum(s.usec for s in stats)


def _bulk(word: bytes) -> bytes:
    """RESP bulk string of a constant word."""
    return b"$%d\r\n%s\r\n" % (len(word), word)


def _command(*words: bytes) -> bytes:
    """RESP array of constant words."""
    return b"*%d\r\n" % len(words) + b"".join(_bulk(w) for w in words)


class _Headers(dict):
    """RESP bulk headers by length (`$12\r\n`), made once per length; C-speed lookups."""

    def __missing__(self, length: int) -> bytes:
        header = self[length] = b"$%d\r\n" % length
        return header


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


_HEADERS = _Headers()
_LENGTH_WORDS = _LengthWords()
_WORDS = _Words()


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
            (b"TYPE", b"k"),
            usage,
            (b"OBJECT", b"ENCODING", b"k"),
            (b"ECHO", marker),
            (b"INFO", b"commandstats"),
            *[(c.encode(), b"k") for c in LENGTH_COMMANDS.values()],
        ]
        for shape in shapes:
            check_read_only(shape)
        self.scan_count = scan_count
        self.usage = b"*%d\r\n" % len(usage) + _bulk(b"MEMORY") + _bulk(b"USAGE")
        self.usage_tail = b"".join(_bulk(w) for w in usage[3:])
        self.encoding = b"*3\r\n" + _bulk(b"OBJECT") + _bulk(b"ENCODING")
        self.heads = {t: b"*2\r\n" + _bulk(c.encode()) for t, c in LENGTH_COMMANDS.items()}
        self.heads["type"] = b"*2\r\n" + _bulk(b"TYPE")
        # The pieces between a key and the next command's key header, in a probe.
        self.length_to_encoding = b"\r\n" + self.encoding
        self.encoding_to_usage = b"\r\n" + self.usage
        self.usage_end = b"\r\n" + self.usage_tail
        self.marker = _command(b"ECHO", marker)
        self.marker_reply = _bulk(marker)
        self.info = _command(b"INFO", b"commandstats")

    def scan(self, cursor: bytes, count: int) -> bytes:
        """SCAN cursor COUNT n."""
        return b"*4\r\n$4\r\nSCAN\r\n" + _bulk(cursor) + _bulk(b"COUNT") + _bulk(b"%d" % count)

    def block(self, kind: str, keys: list[bytes]) -> bytes:
        """`TYPE key`, or a length command, for each key."""
        head = self.heads[kind]
        return b"".join(head + _HEADERS[len(k)] + k + b"\r\n" for k in keys)

    def probe(self, keys: list[bytes], guesses: list[str]) -> bytes:
        """The guessed length command, OBJECT ENCODING and MEMORY USAGE, key after key.

        The length command comes first: it reads the value, so the two after it find the
        key and its value in the server's cache. Built by one join over C iterators."""
        headers = list(map(_HEADERS.__getitem__, map(len, keys)))
        length_heads = map(self.heads.__getitem__, guesses)
        n = len(keys)
        return b"".join(
            chain.from_iterable(
                zip(
                    length_heads,
                    headers,
                    keys,
                    repeat(self.length_to_encoding, n),
                    headers,
                    keys,
                    repeat(self.encoding_to_usage, n),
                    headers,
                    keys,
                    repeat(self.usage_end, n),
                    strict=True,
                )
            )
        )


_TYPE_NAMES = {
    b"+" + t.encode(): t for t in ("string", "list", "hash", "set", "zset", "stream", "none")
}


def _int_or_none(line: bytes) -> int | None:
    """`:123` as 123; a null or an error as None."""
    return int(line[1:]) if line[:1] == b":" else None


def _ints(lines: list[bytes]) -> list[int | None]:
    """Integer replies (one line each); nulls and errors become None."""
    blob = b"".join(lines)
    if b"$" not in blob and b"-" not in blob and blob.count(b":") == len(lines):
        return list(map(int, blob.split(b":")[1:]))
    return [_int_or_none(line) for line in lines]


class _Reader:
    """A byte buffer over the socket with the few RESP shapes the scan receives."""

    def __init__(self, sock) -> None:
        self.sock = sock
        self.buf = b""
        self.pos = 0

    def fill(self) -> None:
        """Append whatever the socket has (blocking until something arrives)."""
        chunk = self.sock.recv(RECV_BYTES)
        if not chunk:
            raise redis.exceptions.ConnectionError("connection closed during the scan")
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0

    def scan_reply(self) -> tuple[bytes, list[bytes]]:
        """Read one SCAN reply: (next cursor, keys)."""
        while True:
            try:
                return self._scan_reply()
            except _Incomplete:
                self.fill()

    def _scan_reply(self) -> tuple[bytes, list[bytes]]:
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
                return cursor, keys
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
        return cursor, keys

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


def lines(section: bytes) -> list[bytes]:
    """The lines of replies holding no binary data (words, numbers, errors), so that
    splitting on CR LF is safe."""
    pieces = section.split(b"\r\n")
    pieces.pop()  # the empty piece after the last CR LF
    return pieces


@dataclass
class _Batch:
    """One SCAN batch and what is known of each key so far."""

    keys: list[bytes]
    prefixes: list[bytes]
    guesses: list[str]
    types: list[str | None] = field(default_factory=list)
    encodings: list[str | None] = field(default_factory=list)
    memory_usage_bytes: list[int | None] = field(default_factory=list)
    elements: list[int | None] = field(default_factory=list)
    second_try: set[int] = field(default_factory=set)  # asked again after a wrong guess

    def __post_init__(self) -> None:
        n = len(self.keys)
        self.types, self.encodings, self.elements = [None] * n, [None] * n, [None] * n
        self.memory_usage_bytes = [None] * n


@dataclass
class _Ask:
    """One block of a round: a command for some keys of one batch."""

    batch: _Batch
    kind: str  # probe | type | a type name (its length command)
    positions: list[int]


@dataclass
class _Round:
    """What one pipelined round asked, so its replies can be read back in order."""

    scan: bool
    asks: list[_Ask]
    info: bool
    keys_through: int  # keys asked about in this round and every earlier one
    scan_read: bool = False


@dataclass
class _Pacer:
    """Keeps the scan's own server time within its share of the wall time so far."""

    share: float
    start: float
    busy_known_us: float = 0.0  # own commands' time, as of the last counters read
    keys_known: int = 0  # keys whose commands that reading covers
    keys_sent: int = 0
    last_info: float = float("-inf")
    rounds: int = 0

    def pause_s(self, now: float, keys_next: int) -> float:
        """How long to wait before sending a round asking about `keys_next` keys: what is
        known, plus the keys not yet counted at the cost per key measured so far."""
        per_key_us = self.busy_known_us / self.keys_known if self.keys_known else 0.0
        pending = self.keys_sent + keys_next - self.keys_known
        projected_us = self.busy_known_us + per_key_us * pending
        return projected_us / 1e6 / self.share - (now - self.start)

    def wants_info(self, now: float) -> bool:
        """Whether this round should read the counters."""
        if self.rounds < PACING_EARLY_ROUNDS or now - self.last_info >= PACING_INFO_INTERVAL_S:
            self.last_info = now
            return True
        return False

    def scan_count(self, limit: int) -> int:
        """COUNT for the next SCAN: small at first, doubling up to `limit`."""
        return min(limit, SLOW_START_KEYS << min(self.rounds, 20))


class _Scan:
    """The state of one scan: batches, type guesses per prefix, asks waiting to be sent."""

    def __init__(
        self, proto: _Protocol, result: ScanResult, prefix_of: Callable[[bytes], bytes]
    ) -> None:
        self.proto, self.result = proto, result
        self.prefixes_of = getattr(prefix_of, "many", None) or (lambda k: list(map(prefix_of, k)))
        self.batches: list[_Batch] = []
        self.guess_of: dict[bytes, str] = {}
        self.type_counts: Counter = Counter()
        self.queued: list[_Ask] = []

    def add_batch(self, keys: list[bytes]) -> None:
        """Queue the probe of fresh keys (kept in SCAN order: the server's cache likes it)."""
        batch = _Batch(keys, [], [])
        self.batches.append(batch)
        self.queued.append(_Ask(batch, "probe", list(range(len(keys)))))

    def encode(self, ask: _Ask) -> Iterator[bytes]:
        """The commands of one ask, in pieces: the first leaves while the next is encoded."""
        batch = ask.batch
        if ask.kind != "probe":
            yield self.proto.block(ask.kind, [batch.keys[i] for i in ask.positions])
            return
        for start in range(0, len(batch.keys), PROBE_CHUNK_KEYS):
            keys = batch.keys[start : start + PROBE_CHUNK_KEYS]
            prefixes = self.prefixes_of(keys)
            guesses = list(map(self.guess_of.get, prefixes))
            if None in guesses:
                default = self.type_counts.most_common(1)[0][0] if self.type_counts else "string"
                guesses = [g or default for g in guesses]
            batch.prefixes += prefixes
            batch.guesses += guesses
            yield self.proto.probe(keys, guesses)

    def read(self, ask: _Ask, lines: list[bytes]) -> None:
        """Store one ask's replies in its batch and queue what they make possible."""
        if ask.kind == "probe":
            self._read_probe(ask.batch, lines)
        elif ask.kind == "type":
            self._read_types(ask.batch, ask.positions, lines)
        else:
            self._read_lengths(ask.batch, ask.kind, ask.positions, lines)

    def _resolve(self, batch: _Batch, i: int, type_name: str) -> None:
        """A key's type is known: remember it as the guess for its prefix."""
        batch.types[i] = type_name
        if type_name in LENGTH_COMMANDS:
            self.guess_of[batch.prefixes[i]] = type_name
            self.type_counts[type_name] += 1

    def _read_probe(self, batch: _Batch, lines: list[bytes]) -> None:
        n = len(batch.keys)
        if len(lines) == 4 * n:  # length, encoding header, encoding, usage: key after key
            length_lines, enc_lines, usage_lines = lines[0::4], lines[2::4], lines[3::4]
            encodings = list(map(_WORDS.__getitem__, enc_lines))
        else:  # a null encoding (key gone) or an error reply takes one line, not two
            usage_lines, encodings, length_lines, at = [], [], [], 0
            for _ in range(n):
                length_lines.append(lines[at])
                enc = lines[at + 1]
                if enc[:1] == b"$" and enc != b"$-1":
                    encodings.append(_WORDS.__getitem__(lines[at + 2]))
                    at += 3
                else:
                    if enc[:1] == b"-":
                        self._error("OBJECT ENCODING", enc)
                    encodings.append(None)
                    at += 2
                usage_lines.append(lines[at])
                at += 1
            if at != len(lines):
                raise ScanError("reply stream out of step with the commands sent")
        batch.encodings = encodings
        batch.memory_usage_bytes = usages = _ints(usage_lines)
        if None in usages:
            for line in usage_lines:
                if line[:1] == b"-":
                    self._error("MEMORY USAGE", line)
        lengths = _ints(length_lines)
        batch.elements = lengths
        guesses, types = batch.guesses, batch.types
        if None not in lengths and None not in encodings:  # every guess right, no key gone
            batch.types = list(guesses)
            self.type_counts.update(guesses)
            new = set(batch.prefixes).difference(self.guess_of)
            if new:  # prefixes first seen here, guessed right by default
                pairs = zip(batch.prefixes, guesses, strict=True)
                self.guess_of.update((p, g) for p, g in pairs if p in new)
            return
        retry: dict[str, list[int]] = {}
        for i, value in enumerate(lengths):
            if encodings[i] is None and usages[i] is None:
                types[i] = "none"  # gone between SCAN and its probe
            elif value is not None:
                self._resolve(batch, i, guesses[i])
            else:
                line = length_lines[i]
                if not line.startswith(b"-WRONGTYPE"):
                    self._error(LENGTH_COMMANDS[guesses[i]], line)
                self.result.guesses_wrong += line.startswith(b"-WRONGTYPE")
                batch.second_try.add(i)
                from_encoding = ENCODING_TYPES.get(encodings[i] or "")
                if from_encoding and from_encoding != guesses[i]:
                    self._resolve(batch, i, from_encoding)
                    retry.setdefault(from_encoding, []).append(i)
                else:  # a shared encoding, or a module type wearing "raw": ask TYPE
                    retry.setdefault("type", []).append(i)
        self.queued += [_Ask(batch, kind, where) for kind, where in retry.items()]

    def _read_types(self, batch: _Batch, positions: list[int], lines: list[bytes]) -> None:
        retry: dict[str, list[int]] = {}
        for i, line in zip(positions, lines, strict=True):
            type_name = _TYPE_NAMES.get(line)
            if type_name is None:
                if line[:1] == b"-":
                    self._error("TYPE", line)
                    continue
                type_name = _WORDS.__getitem__(line[1:])  # a module type: it has no length command
            self._resolve(batch, i, type_name)
            if type_name in LENGTH_COMMANDS and type_name != batch.guesses[i]:
                retry.setdefault(type_name, []).append(i)
            elif type_name not in LENGTH_COMMANDS:
                batch.elements[i] = None
        self.queued += [_Ask(batch, kind, where) for kind, where in retry.items()]

    def _read_lengths(
        self, batch: _Batch, type_name: str, positions: list[int], lines: list[bytes]
    ) -> None:
        for i, value, line in zip(positions, _ints(lines), lines, strict=True):
            batch.elements[i] = value
            if value is None and line[:1] == b"-":
                self._error(LENGTH_COMMANDS[type_name], line)  # no third try

    def _error(self, command: str, line: bytes) -> None:
        """Count an error reply (an ACL may forbid one command); keep the first one's text."""
        self.result.errors[command] += 1
        if self.result.first_error is None:
            self.result.first_error = f"{command}: {line[1:].decode('utf-8', 'replace')}"

    def collect(self) -> None:
        """Concatenate the batches into the result's columns, dropping keys that vanished."""
        result = self.result
        names = ("keys", "prefixes", "types", "encodings", "memory_usage_bytes", "elements")
        for batch in self.batches:
            if "none" in batch.types or None in batch.types:
                keep = [i for i, t in enumerate(batch.types) if t not in ("none", None)]
                result.vanished += len(batch.keys) - len(keep)
                for name in names:
                    column = getattr(batch, name)
                    getattr(result, name).extend(column[i] for i in keep)
            else:
                for name in names:
                    getattr(result, name).extend(getattr(batch, name))


def _no_prefix(key: bytes) -> bytes:
    """Default grouping: none."""
    return b""


def scan_keyspace(
    client: redis.Redis,
    budget: ScanBudget,
    scan_count: int = 1000,
    memory_samples: int | None = None,
    prefix_of: Callable[[bytes], bytes] = _no_prefix,
) -> ScanResult:
    """SCAN the client's database and read each key's bytes, encoding, type and length,
    within `budget`; stops cleanly at the key or time cap.

    `client` comes from yardstick.connect.open_client (INFO as text)."""
    marker = b"yardstick-scan-" + secrets.token_hex(8).encode()
    proto = _Protocol(scan_count, memory_samples, marker)
    result = ScanResult()
    scan = _Scan(proto, result, prefix_of)
    seen: set[bytes] = set()
    result.own_before = own_stats(client)
    busy_start_us = own_usec(result.own_before)
    conn = client.connection_pool.get_connection()
    try:
        conn.connect()
        sock = conn._sock  # noqa: SLF001 - the pipelined scan writes pre-encoded rounds
        # Room for a whole round: sendall returns at once and the client parses the last
        # round while the server reads this one (the kernel caps it at wmem_max).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        reader = _Reader(sock)
        start = time.perf_counter()
        pacer = _Pacer(budget.busy_share, start)
        cursor: bytes | None = b"0"  # None once the scan stops asking for keys
        inflight: deque[_Round] = deque()

        def send_round() -> None:
            keys_next = sum(len(ask.positions) for ask in scan.queued)
            pause_s = pacer.pause_s(time.perf_counter(), keys_next)
            interrupt.check()
            if pause_s > 0:
                interrupt.sleep(pause_s)
                result.paused_s += pause_s
            info = pacer.wants_info(time.perf_counter())
            # Probes go last among the asks: theirs are the only replies whose line count
            # varies. SCAN goes last of all, so that the next round's probes of the keys it
            # returns reach the server right after it walked them (they are still in cache).
            asks = sorted(scan.queued, key=lambda a: a.kind == "probe")
            for ask in asks:
                for piece in scan.encode(ask):
                    sock.sendall(piece)
            tail = [proto.marker, proto.info] if info else [proto.marker]
            if cursor is not None:
                tail.append(proto.scan(cursor, pacer.scan_count(scan_count)))
            sock.sendall(b"".join(tail))
            pacer.keys_sent += keys_next
            pacer.rounds += 1
            inflight.append(_Round(cursor is not None, asks, info, pacer.keys_sent))
            result.rounds += 1
            result.scan_calls += cursor is not None
            scan.queued = []

        send_round()
        while inflight:
            current = inflight.popleft()
            # The SCAN reply comes last: skip to it, send the next round, then parse.
            section = reader.until_marker(proto.marker_reply)
            info_text = reader.bulk_text() if current.info else None
            if current.scan:
                next_cursor, keys = reader.scan_reply()
                fresh = keys if seen.isdisjoint(keys) else [k for k in keys if k not in seen]
                result.duplicates += len(keys) - len(fresh)
                room = budget.max_keys - len(seen)
                if len(fresh) > room or (len(fresh) == room and next_cursor != b"0"):
                    fresh, cursor, result.stop_reason = fresh[:room], None, "key_cap"
                elif next_cursor == b"0":
                    cursor = None
                elif time.perf_counter() - start >= budget.max_wall_s:
                    cursor, result.stop_reason = None, "time_cap"
                else:
                    cursor = next_cursor
                seen.update(fresh)
                if fresh:
                    scan.add_batch(fresh)
            # The server is idle until the next round arrives: send it, then parse this one.
            if cursor is not None or scan.queued:
                send_round()
            replies = lines(section)
            at = 0
            for ask in current.asks:
                if ask.kind == "probe":
                    chunk, at = replies[at:], len(replies)
                else:
                    chunk, at = replies[at : at + len(ask.positions)], at + len(ask.positions)
                scan.read(ask, chunk)
            if at != len(replies):
                raise ScanError("reply stream out of step with the commands sent")
            if info_text is not None:
                stats = parse_commandstats(info_text)
                busy_us = own_usec([s for s in stats if s.command in OWN_COMMANDS]) - busy_start_us
                pacer.busy_known_us, pacer.keys_known = busy_us, current.keys_through
            if not inflight and scan.queued:
                send_round()
        result.wall_s = time.perf_counter() - start
    except BaseException:
        # The connection may hold unread replies: never hand it back to the pool as is.
        conn.disconnect()
        raise
    finally:
        client.connection_pool.release(conn)
    result.own_after = own_stats(client)
    scan.collect()
    return result
