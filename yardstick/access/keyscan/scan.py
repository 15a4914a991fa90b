"""The scan's state machine: SCAN pages become batches of keys, each batch's commands are queued
stage by stage as replies name its keys' types, and the batches end as the result's columns."""

from __future__ import annotations

import operator
from collections import Counter
from itertools import compress, count, repeat

import pyarrow as pa
import pyarrow.compute as pc

from yardstick.access.keyscan.protocol import LENGTH_COMMANDS, _Ask, _Batch, _Protocol
from yardstick.access.keyscan.result import ScanError, ScanResult
from yardstick.access.resp import (
    BULK_PIECES,
    SIMPLE_STRINGS,
    WORDS,
    Ints,
    Reader,
    bulks_of,
    lines,
    own_commands,
    region_commands,
    same_commands,
)

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
# Before Redis 7.2 each typed SCAN looks every walked key up again (and counts a keyspace hit):
# only a type holding this share of the keys is worth one ("scan+type"; a lookup costs about
# 0.4 of a TYPE command there).
TYPED_SCAN_MIN_SHARE = 0.4
SCAN_TYPES = ("string", "hash", "list", "set", "zset", "stream")
# OBJECT ENCODING is read for every key of the first ENCODING_FIRST_KEYS taken, then for one in
# ENCODING_EVERY (and for the top keys at the end); encoding_every=1 reads every key's.
ENCODING_FIRST_KEYS = 4096
ENCODING_EVERY = 16


class _Scan:
    """The state of one scan: batches, and asks waiting to be sent.

    `type_source`: "scan" (a typed SCAN for every type), "scan+type" (a plain SCAN, and a
    typed one for the most common type only, when common enough) or "encoding" (see the
    package's docstring). `modules`: a module is loaded (its types are in no typed page)."""

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
        self.ints = Ints()
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
                lengths.append(region_commands(proto.lengths[kind], page, region))
            usages.append(region_commands(proto.usage, page, region, proto.usage_tail))
        if self.walk_lookups == "walked" and plain is None:
            result.keyspace_lookups += len(keys) * len(pages)
        rest = [] if plain is None else list(set(plain).difference(*(p for _, p, _ in pages)))
        batch = _Batch(keys, None)
        if rest:
            first = len(keys)
            keys += rest
            types += [None] * len(rest)
            batch.shared = list(range(first, len(keys)))
            bulks = bulks_of(rest)
            head = same_commands(proto.type, bulks)
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
                return [same_commands(proto.encoding, batch.bulks)]
            return [same_commands(proto.encoding, batch.some_bulks(ask.positions))]
        if ask.stage == "length":
            bulks = batch.some_bulks(ask.positions)
            return [own_commands([proto.lengths[batch.types[i]] for i in ask.positions], bulks)]
        if ask.heads is not None:  # [length command or TYPE], then MEMORY USAGE
            return [own_commands(ask.heads, batch.bulks), proto.usages(batch.bulks)]
        # Lengths skipped: MEMORY USAGE, then TYPE where the type is not known yet.
        shared = [batch.bulks[i] for i in batch.shared]
        return [proto.usages(batch.bulks), same_commands(proto.type, shared)]

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
            return list(map(BULK_PIECES.__getitem__, pieces[1:]))
        # An error reply (an ACL may forbid OBJECT ENCODING): line by line.
        return self._encodings_walked(n, lines(section))

    def top_encodings(self, top_keys: int, sock, reader: Reader) -> None:
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
        bulks = bulks_of([result.keys[i] for i in positions])
        sock.sendall(same_commands(proto.encoding, bulks) + proto.marker)
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
                encodings.append(WORDS.__getitem__(replies[at + 1]))
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
        names = list(map(SIMPLE_STRINGS.__getitem__, type_lines))
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
