"""scan_keyspace: one scan on a connection of its own, in named steps: the server (_server),
CLIENT NO-TOUCH (_no_touch), how types and encodings are read (_plan), other clients' CPU
(_baseline), the pipelined rounds (_Walk: each sent before the last one's replies are read) and
the final counters (_finish)."""

from __future__ import annotations

import secrets
import socket
import time
from collections import deque

import redis

from yardstick import interrupt
from yardstick.access.info import parse_info
from yardstick.access.keyscan.pacer import (
    _Pacer,
    _process_cpu_matching,
    info_cpu_s,
    process_cpu_s,
)
from yardstick.access.keyscan.protocol import _Protocol, _Reader
from yardstick.access.keyscan.result import ScanBudget, ScanError, ScanResult, own_stats
from yardstick.access.keyscan.scan import ENCODING_EVERY, _Scan
from yardstick.access.rawsock import dedicated_connection, raw_socket
from yardstick.access.resp import bulks_of, lines

# CLIENT NO-TOUCH exists from Redis 7.2 (Valkey reports redis_version 7.2.4). Before, sending
# it would add an error to the server's counters: the version decides whether it is tried.
NO_TOUCH_SINCE = (7, 2)
# SCAN's TYPE option exists from Redis 6.0 (before, sending it would be a syntax error). From
# 7.2 (and in Valkey) the filter is applied while walking, without a lookup: every type can be
# scanned for next to nothing. Before, each typed SCAN looks every walked key up again (and
# counts a keyspace hit): only the most common type is worth a typed SCAN ("scan+type").
TYPED_SCAN_SINCE = (6, 0)
CHEAP_TYPE_FILTER_SINCE = (7, 2)
# Room for a whole round in the socket's send buffer (see scan_keyspace).
SEND_BUFFER_BYTES = 4 << 20


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
    `type_source`: "auto" (by the server: see the package's docstring), "scan", "scan+type" or
    "encoding" (every key's OBJECT ENCODING; `encoding_every` is then 1). `encoding_every`:
    after the first ENCODING_FIRST_KEYS keys, one key's OBJECT ENCODING in this many (None:
    ENCODING_EVERY).
    `top_keys`: the encodings of this many biggest keys by bytes and by elements are read at
    the end (the report's top keys).
    `client` comes from yardstick.access.connect.open_client (INFO as text)."""
    marker = b"yardstick-scan-" + secrets.token_hex(8).encode()
    proto = _Protocol(scan_count, memory_samples, marker)
    result = ScanResult()
    result.own_before = own_stats(client)
    with dedicated_connection(client) as conn:
        server, modules = _server(conn, result)
        version = _version(result.server_version or "0")
        no_touch = _no_touch(conn, result, version, allow_touch)
        scan = _plan(proto, result, server, version, modules, type_source, encoding_every)
        pid = int(server.get("process_id", 0) or 0) if on_server_host else 0
        cpu_start_s = _baseline(conn, result, baseline_s)
        proc_start = _process_cpu_matching(pid, cpu_start_s) if pid else None

        sock = raw_socket(conn)  # the pipelined scan writes pre-encoded rounds
        # Room for a whole round: sendall returns at once and the client parses the last
        # round while the server reads this one (the kernel caps it at wmem_max).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        reader = _Reader(sock, low_water=type(sock) is socket.socket)
        start = time.perf_counter()
        result.cpu_start_s = cpu_start_s
        pacer = _Pacer(budget.cpu_share, result.baseline_cpu_share, start, cpu_start_s)
        _Walk(proto, scan, result, pacer, budget, scan_count, sock, reader, start).run()
        scan.collect()
        if top_keys > 0 and result.encoding_every > 1:
            scan.top_encodings(top_keys, sock, reader)
        reader.close()  # redis-py reads this connection again from here
        _finish(conn, result, pacer, start, pid, proc_start)
        if no_touch:
            _ask(conn, "CLIENT", "NO-TOUCH", "OFF")  # the connection goes back to the pool
    result.own_after = own_stats(client)
    result.encodings_read = len(result.encodings) - result.encodings.count(None)
    return result


def _server(conn, result: ScanResult) -> tuple[dict, dict]:
    """INFO server and INFO modules of the scanned server; its version into `result`."""
    server = parse_info(_text(_ask(conn, "INFO", "server"))).get("server", {})
    result.server_version = server.get("redis_version")
    modules = parse_info(_text(_ask(conn, "INFO", "modules"))).get("modules", {})
    return server, modules


def _no_touch(conn, result: ScanResult, version: tuple[int, ...], allow_touch: bool) -> bool:
    """Turn CLIENT NO-TOUCH on where the server has it; the scan's touch mode into `result`."""
    no_touch = False
    if version >= NO_TOUCH_SINCE:
        try:
            _ask(conn, "CLIENT", "NO-TOUCH", "ON")
            no_touch = True
        except redis.exceptions.ResponseError as exc:  # an ACL without +client|no-touch
            result.errors["CLIENT NO-TOUCH"] += 1
            result.first_error = result.first_error or f"CLIENT NO-TOUCH: {exc}"
            result.touch_note = f"CLIENT NO-TOUCH refused: {exc}"
    else:
        result.touch_note = f"Redis {result.server_version} has no CLIENT NO-TOUCH (7.2 and later)"
    if no_touch:
        result.touch_mode = "no-touch"
    else:
        result.touch_mode = "touched" if allow_touch else "skipped"
    return no_touch


def _plan(
    proto: _Protocol,
    result: ScanResult,
    server: dict,
    version: tuple[int, ...],
    modules: dict,
    type_source: str,
    encoding_every: int | None,
) -> _Scan:
    """How types are read (by the server, unless asked) and how often encodings are: the scan."""
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
    return _Scan(
        proto,
        result,
        result.touch_mode != "skipped",
        raw_is_string=not modules,
        type_source=type_source,
        encoding_every=encoding_every,
        walk_lookups=walk_lookups,
    )


def _baseline(conn, result: ScanResult, baseline_s: float) -> float:
    """Other clients' CPU share just before the scan, into `result` (subtracted from what the
    scan costs); the server's CPU seconds at its end. Without a window, none: two INFO calls
    back to back would read mostly their own."""
    cpu0, t0 = info_cpu_s(_text(_ask(conn, "INFO", "cpu"))), time.perf_counter()
    cpu1, t1 = cpu0, t0
    if baseline_s > 0:
        interrupt.sleep(baseline_s)
        cpu1, t1 = info_cpu_s(_text(_ask(conn, "INFO", "cpu"))), time.perf_counter()
    result.baseline_window_s = t1 - t0
    result.baseline_cpu_share = max(0.0, (cpu1 - cpu0) / (t1 - t0)) if t1 > t0 else 0.0
    return cpu1


def _finish(
    conn, result: ScanResult, pacer: _Pacer, start: float, pid: int, proc_start: float | None
) -> None:
    """The scan's wall time, the server's CPU at its end and the pacer's bursts, into `result`."""
    end_cpu = info_cpu_s(_text(_ask(conn, "INFO", "cpu")))
    end = time.perf_counter()
    pacer.record(end, end_cpu, pacer.commands_sent)
    result.wall_s, result.cpu_end_s = end - start, end_cpu
    if proc_start is not None:
        result.process_cpu_s = process_cpu_s(pid) - proc_start
    result.cpu_peak_share, result.cpu_peak_window_s, result.over_budget_longest_s = pacer.bursts()


class _Walk:
    """The pipelined rounds of one scan: each round sent before the last one's replies are
    read, pages cut at the key and time caps."""

    def __init__(
        self,
        proto: _Protocol,
        scan: _Scan,
        result: ScanResult,
        pacer: _Pacer,
        budget: ScanBudget,
        scan_count: int,
        sock,
        reader: _Reader,
        start: float,
    ) -> None:
        self.proto, self.scan, self.result, self.pacer = proto, scan, result, pacer
        self.budget, self.scan_count, self.sock, self.reader = budget, scan_count, sock, reader
        self.start = start
        self.cursor: bytes | None = b"0"  # the next page's cursor; None once no page is asked
        # A page read again by a plain SCAN from the same cursor (next round): to cut it in
        # SCAN order at the key cap, or because its typed SCANs' next cursors differed.
        self.again: dict | None = None
        self.taken = 0  # keys taken from SCAN replies (a key SCAN returned twice counts twice)
        self.inflight: deque[tuple] = deque()

    def run(self) -> None:
        """Rounds until no page is asked and nothing is queued."""
        scan, reader, proto, pacer = self.scan, self.reader, self.proto, self.pacer
        self.send_round()
        while self.inflight:
            page, encoding, fixed, info, commands_through, least_head, least_tail = (
                self.inflight.popleft()
            )
            reader.expect(least_head)
            if page is not None:
                plain = reader.scan_reply() if page[4] else None
                # The same page's keys of each type (the same buckets, so the same next cursor).
                typed = [(t, *reader.scan_reply()) for t in page[3]]
                self.take_page(page, plain, typed)
            # The server is still on this round: queue the next one behind it, then read on.
            if not self.inflight and self.wants_round():
                self.send_round()
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
            if not self.inflight and self.wants_round():
                self.send_round()

    def wants_round(self) -> bool:
        """Whether a page, a queued key command or a page to read again is left."""
        again = self.again
        return (
            self.cursor is not None
            or bool(self.scan.queued)
            or (again is not None and not again["sent"])
        )

    def send_round(self) -> None:
        """One round's commands, paced, sent at once."""
        scan, proto, pacer, result = self.scan, self.proto, self.pacer, self.result
        encoding, fixed = scan.take()
        asks = fixed if encoding is None else [encoding, *fixed]
        commands = sum(ask.commands for ask in asks) + 2  # + the two markers
        info = pacer.wants_info(time.perf_counter())
        page = None  # (kind, cursor, COUNT, types, plain SCAN too)
        if self.again is not None and not self.again["sent"]:
            self.again["sent"] = True
            page = ("again", self.again["cursor"], self.again["count"], (), True)
        elif self.cursor is not None:
            types = scan.scan_types()
            plain = scan.wants_plain() or not types
            page = ("page", self.cursor, pacer.scan_count(self.scan_count), types, plain)
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
        self.sock.sendall(b"".join(pieces))
        # The least its replies weigh, up to each marker: what the reader may sleep for.
        least_head = 15 * scans + len(proto.marker_reply)
        least_head += 5 * encoding.commands if encoding is not None else 0
        least_tail = 4 * sum(ask.commands for ask in fixed) + len(proto.marker_reply)
        pacer.commands_sent += commands
        pacer.rounds += 1
        self.inflight.append(
            (page, encoding, fixed, info, pacer.commands_sent, least_head, least_tail)
        )
        result.rounds += 1
        result.scan_calls += page is not None
        result.typed_scan_calls += 0 if page is None else len(page[3])
        result.commands += commands

    def go_on(self, next_cursor: bytes) -> None:
        """The next page's cursor, unless the scan is complete or out of time."""
        if next_cursor == b"0":
            self.cursor = None
        elif time.perf_counter() - self.start >= self.budget.max_wall_s:
            self.cursor, self.result.stop_reason = None, "time_cap"
        else:
            self.cursor = next_cursor

    def cut(self, keys: list[bytes], next_cursor: bytes) -> list[bytes]:
        """A plain page's keys within the key cap, and what comes next."""
        room = self.budget.max_keys - self.taken
        if len(keys) > room or (len(keys) == room and next_cursor != b"0"):
            keys = keys[:room]
            self.cursor, self.result.stop_reason = None, "key_cap"
        else:
            self.go_on(next_cursor)
        self.taken += len(keys)
        return keys

    def take_page(self, page: tuple, plain: tuple | None, typed: list[tuple]) -> None:
        """One page's replies: the plain SCAN's (cursor, keys, raw bulks) or None, and the
        typed SCANs' (type, cursor, keys, raw bulks)."""
        scan, result = self.scan, self.result
        if scan.type_source == "encoding":
            keys = self.cut(plain[1], plain[0])
            if keys:
                scan.add_batch(keys, bulks_of(keys))
            return
        if page[0] == "again":
            held, self.again = self.again["pages"], None
            if held is None:  # its typed SCANs disagreed: every type asked with TYPE
                keys = self.cut(plain[1], plain[0])
                if keys:
                    scan.add_pages([], keys)
                return
            keys = plain[1][: self.budget.max_keys - self.taken]  # the key cap, in SCAN order
            allowed = set(keys)
            self.taken += len(keys)
            scan.add_pages([(t, [k for k in ks if k in allowed], None) for t, ks, _ in held], keys)
            return
        cursors = {c for _, c, _, _ in typed} | ({plain[0]} if plain is not None else set())
        if len(cursors) > 1:  # not the same buckets (a table resized meanwhile)
            result.type_fallback_pages += 1
            if plain is not None:
                keys = self.cut(plain[1], plain[0])
                if keys:
                    scan.add_pages([], keys)
            else:
                self.again = {"cursor": page[1], "count": page[2], "pages": None, "sent": False}
                self.cursor = None
            return
        next_cursor = cursors.pop()
        pages = [(t, ks, region) for t, _, ks, region in typed]
        n = len(plain[1]) if plain is not None else sum(len(ks) for _, ks, _ in pages)
        room = self.budget.max_keys - self.taken
        if n > room or (n == room and next_cursor != b"0"):
            self.cursor, result.stop_reason = None, "key_cap"
            if plain is None:  # its order is needed: read it again without TYPE
                self.again = {"cursor": page[1], "count": page[2], "pages": pages, "sent": False}
                return
            keys = plain[1][:room]
            allowed = set(keys)
            self.taken += len(keys)
            scan.add_pages([(t, [k for k in ks if k in allowed], None) for t, ks, _ in pages], keys)
            return
        self.go_on(next_cursor)
        self.taken += n
        if n:
            scan.add_pages(pages, plain[1] if plain is not None else None)
