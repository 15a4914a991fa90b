"""RESP on a raw socket: commands encoded once (words, keys' bulk strings, one command per key in
one join) and a buffered reader of the reply shapes a pipelined round gets back."""

from __future__ import annotations

import socket
from itertools import chain, repeat

import redis

RECV_BYTES = 1 << 20
# The most a read waits for before it wakes (SO_RCVLOWAT), below the socket's receive buffer.
LOW_WATER_BYTES = 64 << 10
# Distinct integer replies remembered (see Ints); past this the cache starts again.
INT_CACHE_ENTRIES = 200_000


class ReplyError(redis.exceptions.RedisError):
    """A reply the reader cannot take: an error where data was due, or bytes out of shape."""


class _Incomplete(Exception):
    """The buffer does not yet hold the whole reply."""


class LengthWords(dict):
    """`$12` by length, as a SCAN reply's key headers read once split on CR LF."""

    def __missing__(self, length: int) -> bytes:
        word = self[length] = b"$%d" % length
        return word


LENGTH_WORDS = LengthWords()


def bulk(word: bytes) -> bytes:
    """RESP bulk string of a constant word."""
    return b"$%d\r\n%s\r\n" % (len(word), word)


def command(*words: bytes) -> bytes:
    """RESP array of constant words."""
    return b"*%d\r\n" % len(words) + b"".join(bulk(w) for w in words)


def bulks_of(keys: list[bytes], heads: list[bytes] | None = None) -> list[bytes]:
    """Each key's RESP bulk string (`$12\r\nuser:1:name\r\n`), from its `$12` when known."""
    if heads is None:
        heads = list(map(LENGTH_WORDS.__getitem__, map(len, keys)))
    return list(map(b"".join, zip(heads, repeat(b"\r\n"), keys, repeat(b"\r\n"))))


def same_commands(head: bytes, bulks: list[bytes], tail: bytes = b"") -> bytes:
    """One command for each key, the same: `head`, the key's bulk, `tail` (one separator
    join)."""
    return head + (tail + head).join(bulks) + tail if bulks else b""


def own_commands(heads: list[bytes], bulks: list[bytes]) -> bytes:
    """One command for each key, its own: `heads[i]` then the key's bulk."""
    return b"".join(chain.from_iterable(zip(heads, bulks, strict=True)))


def region_commands(
    head: bytes, keys: list[bytes], region: bytes | None, tail: bytes = b""
) -> bytes:
    """One command for each key, the same: `head`, the key's bulk, `tail`. From `region`, the
    keys' bulks as a SCAN reply held them back to back, by one replace at C speed where no key
    starts with `$` (the boundaries are then exactly the CR LF `$` in it)."""
    if region is not None and region.count(b"\r\n$") == len(keys) - 1:
        return head + region.replace(b"\r\n$", b"\r\n" + tail + head + b"$") + tail
    return same_commands(head, bulks_of(keys), tail)


class Words(dict):
    """Reply words as interned str (encodings repeat a million times); C-speed lookups."""

    def __missing__(self, word: bytes) -> str:
        text = self[word] = word.decode("utf-8", "backslashreplace")
        return text


class SimpleStrings(dict):
    """A simple-string reply line (`+string`: a TYPE reply) as its text; "?" for an error
    reply (the caller counts it)."""

    def __missing__(self, line: bytes) -> str:
        if line[:1] != b"+":
            return "?"
        name = self[line] = line[1:].decode("utf-8", "backslashreplace")
        return name


class BulkPieces(dict):
    """A bulk-string reply (OBJECT ENCODING's), as the piece its section splits into on CR LF
    `$` (`8\r\nlistpack`), as its text; a null (`-1`: the key is gone) as ""."""

    def __missing__(self, piece: bytes) -> str:
        word = piece.partition(b"\r\n")[2]
        name = self[piece] = word.decode("utf-8", "backslashreplace") if word else ""
        return name


WORDS = Words()
SIMPLE_STRINGS = SimpleStrings()
BULK_PIECES = BulkPieces()


class Ints(dict):
    """Integer reply lines (`:123`) as int, cached: lengths and sizes repeat, and a dict
    lookup over a C iterator is the cheapest parse. A null (`$-1`) or a TYPE reply (`+hash`)
    reads None. Error lines read None too and are never cached: each one is kept in
    `errors` for the caller to count and attribute."""

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


class Reader:
    """A byte buffer over a socket with the few RESP shapes a pipelined read takes: SCAN
    replies, every reply up to a marker's echo, one bulk string.

    On a plain TCP socket it sleeps until the least a round's replies can weigh has arrived
    (SO_RCVLOWAT), not at every piece the server writes: on a busy host each wakeup may wait
    for a time slice."""

    error: type[Exception] = ReplyError  # what a reply it cannot take raises

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
            raise self.error("SCAN: " + buf[p + 1 : end].decode("utf-8", "replace"))
        # *2 CRLF $n CRLF cursor CRLF *k CRLF, then k bulk strings.
        head = buf[p : p + 64].split(b"\r\n", 4)
        if len(head) < 5:
            if len(buf) - p < 64:
                raise _Incomplete
            raise self.error(f"unexpected SCAN reply {buf[p : p + 40]!r}")
        if head[0] != b"*2" or head[3][:1] != b"*":
            raise self.error(f"unexpected SCAN reply {buf[p : p + 40]!r}")
        cursor, count = head[2], int(head[3][1:])
        p += sum(map(len, head[:4])) + 8
        # Fast path: keys without CR LF split cleanly into header/key pairs; lengths verify it.
        parts = buf[p:].split(b"\r\n", 2 * count)
        if len(parts) == 2 * count + 1:
            heads, keys = parts[0 : 2 * count : 2], parts[1 : 2 * count : 2]
            # A CR LF inside a key shifts the pieces: the header before it then disagrees.
            if heads == list(map(LENGTH_WORDS.__getitem__, map(len, keys))):
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
                    raise self.error(f"unexpected reply {self.buf[self.pos : end][:60]!r}")
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
