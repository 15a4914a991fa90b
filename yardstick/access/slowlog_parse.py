"""SLOWLOG GET and LATENCY replies: entries of every known shape, argument redaction by the
server's own command metadata (yardstick.access.command_meta), and the text redis-cli prints (JSON,
--no-raw, raw) so that captured outputs parse like live replies."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from yardstick.access.command_meta import CommandSpec, CommandTable, DocArg

# Commands whose second word is a subcommand: the key (if any) comes third, and the
# command is named like INFO commandstats does (`config|get`).
CONTAINER_COMMANDS = frozenset(
    {
        "acl",
        "client",
        "cluster",
        "command",
        "config",
        "debug",
        "function",
        "latency",
        "memory",
        "module",
        "object",
        "pubsub",
        "script",
        "slowlog",
        "xgroup",
        "xinfo",
    }
)
# Script bodies by position (FUNCTION LOAD: its last argument): each becomes its SHA1, which
# for EVAL and SCRIPT LOAD is exactly what EVALSHA calls it by.
SCRIPT_BODY_AT = {"eval": 1, "eval_ro": 1, "script|load": 2}
# A script's SHA1 or a function's name: what the operator looks the script up by; kept.
SCRIPT_NAME_AT = {"evalsha": 1, "evalsha_ro": 1, "fcall": 1, "fcall_ro": 1}
# Script commands take `numkeys` then the keys at 2: the key specs of 7.0+ say so, servers
# without key specs (6.2: first/last/step 0 for these) are told here.
NUMKEYS_AT_2 = frozenset({*SCRIPT_NAME_AT, *SCRIPT_BODY_AT} - {"script|load"})
# Redis logs at most 32 arguments; the 32nd then counts the ones left out.
SLOWLOG_MAX_ARGC = 32
MORE_BYTES = re.compile(r"^(.*)\.\.\. \((\d+) more bytes\)$", re.S)
MORE_ARGS = re.compile(r"^\.\.\. \((\d+) more arguments\)$")
ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[^\s:]+):\d+$|^/\S*:0$")


@dataclass(frozen=True)
class SlowlogEntry:
    """One SLOWLOG entry, whatever shape the server sent."""

    entry_id: int
    logged_at_s: int  # unix time when Redis logged it
    duration_us: int  # execution time only: never the time spent queued
    args: tuple[str, ...]  # as logged (Redis keeps 32 arguments of up to 128 bytes)
    client_addr: str | None
    client_name: str | None
    entry_fields: int  # 4 (before 4.0, Redis Enterprise), 6, or 7
    complexity: str | None = None  # Redis Enterprise: the N of an O(N) command
    arg_count_original: int | None = None  # Redis 8.10+: argument count before truncation

    @property
    def command(self) -> str:
        """Command name as INFO commandstats spells it (`sort`, `config|get`)."""
        return command_name(self.args)


@dataclass(frozen=True)
class LatencyEvent:
    """One LATENCY LATEST row: the latest spike of an event and its all-time worst."""

    event: str
    latest_at_s: int
    latest_ms: int
    max_ms: int


def text(value: Any) -> str:
    """A reply element as text; bytes that are not UTF-8 keep their escapes."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def _optional_text(value: Any) -> str | None:
    """Text of an optional field; empty strings (no client name) become None."""
    if value is None:
        return None
    result = text(value)
    return result or None


def parse_entry(item: list[Any]) -> SlowlogEntry:
    """Read one entry: [id, time, duration, args(, addr, name(, argc))] or Redis Enterprise's
    [id, time, duration, complexity, args(, addr, name)]."""
    if len(item) < 4:
        raise ValueError(f"SLOWLOG entry with {len(item)} fields: expected at least 4")
    head = {"entry_id": int(item[0]), "logged_at_s": int(item[1]), "duration_us": int(item[2])}
    if isinstance(item[3], list | tuple):
        rest, complexity = list(item[3:]), None
    else:
        # Redis Enterprise puts the complexity before the arguments.
        if len(item) < 5 or not isinstance(item[4], list | tuple):
            raise ValueError("SLOWLOG entry without an argument array")
        rest, complexity = list(item[4:]), text(item[3])
    args = tuple(text(a) for a in rest[0])
    addr = _optional_text(rest[1]) if len(rest) > 1 else None
    name = _optional_text(rest[2]) if len(rest) > 2 else None
    argc = int(rest[3]) if len(rest) > 3 and rest[3] is not None else None
    return SlowlogEntry(
        **head,
        args=args,
        client_addr=addr,
        client_name=name,
        entry_fields=len(item),
        complexity=complexity,
        arg_count_original=argc,
    )


def parse_slowlog(reply: list[Any] | None) -> list[SlowlogEntry]:
    """Every entry of a SLOWLOG GET reply (newest first, as Redis sends them)."""
    return [parse_entry(item) for item in reply or []]


def command_name(args: tuple[str, ...] | list[str]) -> str:
    """`sort`, or `config|get` for container commands."""
    if not args:
        return ""
    name = args[0].lower()
    if name in CONTAINER_COMMANDS and len(args) > 1:
        return f"{name}|{args[1].lower()}"
    return name


def _size(arg: str) -> int:
    """An argument's length in bytes, Redis's truncation counted back in."""
    match = MORE_BYTES.match(arg)
    if match:
        return len(match.group(1).encode("utf-8", errors="surrogateescape")) + int(match.group(2))
    return len(arg.encode("utf-8", errors="surrogateescape"))


def _redacted(arg: str) -> str:
    """An argument replaced by its length in bytes."""
    return f"<{_size(arg)} bytes>"


def script_digest(arg: str) -> str:
    """A script body replaced by its SHA1 (EVALSHA's name for it). A body Redis cut at 128
    bytes has no knowable SHA1: its length and the SHA1 of the part logged stand in."""
    match = MORE_BYTES.match(arg)
    if match:
        head = match.group(1).encode("utf-8", errors="surrogateescape")
        digest = hashlib.sha1(head).hexdigest()
        return f"<script {_size(arg)} bytes, first {len(head)} sha1:{digest}>"
    body = arg.encode("utf-8", errors="surrogateescape")
    return f"<script sha1:{hashlib.sha1(body).hexdigest()}>"


_STRICT_INT = re.compile(r"^(0|-?[1-9]\d*)$")  # what Redis's string2ll accepts


def key_positions(
    args: list[str], spec: CommandSpec, argc: int | None = None, complete: bool = True
) -> tuple[set[int], set[int]]:
    """Positions of the keys, and of the counts saying how many keys follow (`numkeys`), as
    the server finds them (src/db.c getKeysUsingKeySpecs; first/last/step before 7.0).
    `args` are the logged arguments; `argc` the count before SLOWLOG cut them, when known
    (with fewer arguments than the command had, only positions that are surely keys)."""
    n = len(args)
    argc = max(argc or n, n)
    keys: set[int] = set()
    counts: set[int] = set()

    def add(first: int, last: int, step: int) -> None:
        step = max(step, 1)
        if first < 1:  # never the command name: the first position >= 1 on the same stride
            first += -(-(1 - first) // step) * step
        keys.update(range(first, min(last, n - 1) + 1, step))

    if spec.first_key > 0:
        last = spec.last_key if spec.last_key >= 0 else argc + spec.last_key
        add(spec.first_key, last, spec.key_step)
    for ks in spec.key_specs or ():
        if ks.begin == "index":
            first = ks.index
        elif ks.begin == "keyword":
            if ks.startfrom < 0 and not complete:
                continue  # searched from the end: the end was not logged
            if ks.startfrom > 0:
                search = range(ks.startfrom, min(argc - 1, n))
            else:
                search = range(min(argc + ks.startfrom, n - 1), 1, -1)
            found = [i for i in search if args[i].lower() == ks.keyword.lower()]
            if not found:
                continue
            first = found[0] + 1
        else:
            continue  # "unknown": the server cannot tell either
        if ks.find == "range":
            if ks.lastkey >= 0:
                last = first + ks.lastkey
            elif not ks.limit:
                last = argc + ks.lastkey
            else:
                last = first + ((argc - first) // ks.limit + ks.lastkey)
            add(first, last, ks.keystep)
        elif ks.find == "keynum":
            at = first + ks.keynumidx
            if at >= n or not _STRICT_INT.match(args[at]) or int(args[at]) < 0:
                continue
            counts.add(at)
            first += ks.firstkey
            add(first, first + int(args[at]) - 1, ks.keystep)
    if spec.key_specs is None and command_name(args) in NUMKEYS_AT_2 and n > 2:
        # Before 7.0 the script commands' keys are found by code, not metadata.
        if _STRICT_INT.match(args[2]) and int(args[2]) >= 0:
            counts.add(2)
            add(3, 2 + int(args[2]), 1)
    return keys, counts


# The label of a move that consumes a key (any other value: None; a literal: the word).
_KEY = "\x00key"


class _Nfa:
    """A nondeterministic automaton over arguments, built from a COMMAND DOCS syntax tree:
    each move consumes one argument: a literal word (its token), a key, or any value."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.moves: list[list[tuple[str | None, int]]] = []

    def state(self) -> int:
        self.eps.append([])
        self.moves.append([])
        return len(self.eps) - 1

    def move(self, word: str | None) -> tuple[int, int]:
        s, e = self.state(), self.state()
        self.moves[s].append((word.upper() if word not in (None, _KEY) else word, e))
        return s, e

    def seq(self, frags: list[tuple[int, int]]) -> tuple[int, int]:
        if not frags:
            s = self.state()
            return s, s
        for (_, end), (start, _) in zip(frags, frags[1:], strict=False):
            self.eps[end].append(start)
        return frags[0][0], frags[-1][1]

    def alt(
        self, frags: list[tuple[int, int]], optional: bool = False, repeat: bool = False
    ) -> tuple[int, int]:
        s, e = self.state(), self.state()
        for start, end in frags:
            self.eps[s].append(start)
            self.eps[end].append(e)
            if repeat:
                self.eps[end].append(s)
        if optional:
            self.eps[s].append(e)
        return s, e

    def argument(self, arg: DocArg) -> tuple[int, int]:
        """One argument (its token, its value(s), its repetitions), optional or not."""
        if arg.type == "pure-token":
            frag = self.move(arg.token)
            if arg.multiple:
                frag = self.alt([frag], repeat=True)
        else:
            if arg.type == "oneof":
                unit = self.alt([self.argument(c) for c in arg.children])
            elif arg.type == "block":
                unit = self.sequence(arg.children)
            elif arg.type == "key":
                unit = self.move(_KEY)
            else:
                unit = self.move(None)
            if arg.multiple and not (arg.token and arg.multiple_token):
                unit = self.alt([unit], repeat=True)
            frag = self.seq([self.move(arg.token), unit]) if arg.token else unit
            if arg.multiple and arg.token and arg.multiple_token:
                frag = self.alt([frag], repeat=True)
        return self.alt([frag], optional=True) if arg.optional else frag

    def sequence(self, args: tuple[DocArg, ...]) -> tuple[int, int]:
        """Arguments in order, except that a run of optional ones may come in any order and
        any number of times: Redis reads most options in a loop (`SET k v EX 10 NX`)."""
        frags: list[tuple[int, int]] = []
        run: list[tuple[int, int]] = []
        for arg in args:
            if arg.optional:
                run.append(self.argument(replace(arg, optional=False)))
                continue
            if run:
                frags.append(self.alt(run, optional=True, repeat=True))
                run = []
            frags.append(self.argument(arg))
        if run:
            frags.append(self.alt(run, optional=True, repeat=True))
        return self.seq(frags)

    def closure(self, states: set[int], edges: list[list[int]]) -> set[int]:
        out, todo = set(states), list(states)
        while todo:
            for t in edges[todo.pop()]:
                if t not in out:
                    out.add(t)
                    todo.append(t)
        return out


@functools.lru_cache(maxsize=512)
def _automaton(syntax: tuple[DocArg, ...]) -> tuple[_Nfa, int, int, list[list[int]], list]:
    """The automaton of a syntax (built once per syntax), its start and end states, its
    reversed epsilon edges and its moves as (from, word, to)."""
    nfa = _Nfa()
    begin, end = nfa.sequence(syntax)
    reverse: list[list[int]] = [[] for _ in nfa.eps]
    for s, targets in enumerate(nfa.eps):
        for t in targets:
            reverse[t].append(s)
    moves = [(s, w, t) for s, out in enumerate(nfa.moves) for w, t in out]
    return nfa, begin, end, reverse, moves


def syntax_positions(
    args: list[str],
    start: int,
    syntax: tuple[DocArg, ...],
    complete: bool = True,
    keys: set[int] | None = None,
) -> tuple[set[int], set[int]] | None:
    """Positions (from `start` on) that are a literal word of the command's syntax, and
    those that are a key of it, in every way the syntax can read the arguments; None when it
    cannot read them at all (then no word is known to be literal). A value that happens to
    spell a token stays a value wherever the syntax allows a value there. With `keys` (the
    positions COMMAND INFO locates, when its key specs are complete) a key of the syntax is
    read only there: `ZUNIONSTORE d 2 a b WEIGHTS 1 2` reads WEIGHTS as the word, not as a
    third key."""

    def _matches(word: str | None, position: int, arg: str) -> bool:
        if word is None:
            return True
        if word == _KEY:
            return keys is None or position in keys
        return arg.upper() == word

    nfa, begin, end, reverse, moves = _automaton(syntax)
    words = args[start:]
    forward = [nfa.closure({begin}, nfa.eps)]
    for i, arg in enumerate(words, start):
        step = {t for s in forward[-1] for w, t in nfa.moves[s] if _matches(w, i, arg)}
        forward.append(nfa.closure(step, nfa.eps))
    every = set(range(len(nfa.eps)))
    backward = [every if not complete else nfa.closure({end}, reverse)]
    for i in range(len(args) - 1, start - 1, -1):
        after = backward[0]
        step = {s for s, w, t in moves if t in after and _matches(w, i, args[i])}
        backward.insert(0, nfa.closure(step, reverse))
    if not forward[-1] & backward[-1]:
        return None
    literal, key = set(), set()
    for i, arg in enumerate(words):
        labels = {
            w
            for s in forward[i]
            for w, t in nfa.moves[s]
            if t in backward[i + 1] and _matches(w, start + i, arg)
        }
        if labels == {_KEY}:
            key.add(start + i)
        elif labels and not labels & {None, _KEY}:
            literal.add(start + i)
    return literal, key


def _spec_for(commands: CommandTable | None, args: list[str]) -> tuple[CommandSpec | None, int]:
    """The spec of the (sub)command and where its own arguments start."""
    if not commands:
        return None, 1
    top = commands.get(args[0].lower())
    if len(args) > 1 and (top is None or top.subcommands):
        sub = commands.get(f"{args[0].lower()}|{args[1].lower()}")
        if sub is not None:
            return sub, 2
    return top, 1


def redact(
    args: tuple[str, ...] | list[str],
    commands: CommandTable | None = None,
    arg_count: int | None = None,
) -> list[str]:
    """Replace every value by its length, by an allow-list the server gives per command:
    the command (and subcommand) name, the keys COMMAND INFO locates (and those only its
    COMMAND DOCS syntax locates), the key counts, and the literal words of that syntax are
    kept; script bodies become
    their SHA1 (EVALSHA's SHA1 and FCALL's function name are kept). Without `commands` (or
    for a command the server does not describe) only the command's name is kept."""
    if not args:
        return []
    args = list(args)
    marker = len(args) == SLOWLOG_MAX_ARGC and MORE_ARGS.match(args[-1]) is not None
    logged = args[:-1] if marker else args
    name = command_name(logged)
    kept = {0}
    if args[0].lower() in CONTAINER_COMMANDS and len(logged) > 1:
        kept.add(1)  # the subcommand: the `command` column names it anyway
    spec, start = _spec_for(commands, logged)
    if spec is not None:
        if start == 2:
            kept.add(1)
        keys, counts = key_positions(logged, spec, arg_count, complete=not marker)
        kept |= keys | counts
        if spec.arguments is not None:
            # Key specs marked unknown (SORT ... STORE dest on 7.0) leave keys unlocated.
            located = all("unknown" not in (k.begin, k.find) for k in spec.key_specs or ())
            read = syntax_positions(
                logged, start, spec.arguments, not marker, keys if located else None
            )
            if read is not None:
                kept |= read[0] | read[1]
        if name in SCRIPT_NAME_AT:
            kept.add(SCRIPT_NAME_AT[name])
    bodies = set()
    if name in SCRIPT_BODY_AT:
        bodies.add(SCRIPT_BODY_AT[name])
    elif name == "function|load" and len(logged) > 2:
        bodies.add(len(logged) - 1)
    out = []
    for position, arg in enumerate(args):
        if marker and position == len(args) - 1:
            out.append(arg)  # "... (N more arguments)": Redis's own count
        elif position in bodies:
            out.append(script_digest(arg))
        elif position in kept:
            out.append(arg)
        else:
            out.append(_redacted(arg))
    return out


def parse_latency_latest(reply: list[Any] | None) -> list[LatencyEvent]:
    """LATENCY LATEST rows: [event, unix time, latest ms, all-time max ms]."""
    return [
        LatencyEvent(event=text(r[0]), latest_at_s=int(r[1]), latest_ms=int(r[2]), max_ms=int(r[3]))
        for r in reply or []
    ]


def parse_latency_history(reply: list[Any] | None) -> list[tuple[int, int]]:
    """LATENCY HISTORY samples as (unix time, ms): Redis keeps the worst per second."""
    return [(int(r[0]), int(r[1])) for r in reply or []]


# --- redis-cli output, so that captured samples and live replies share one parser ----------

_MARKER = re.compile(r"\s*(\d+)\) ")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", '"': '"', "\\": "\\"}


def _unquote(value: str) -> str:
    """Undo redis-cli's quoting of a bulk string ("..." with \\n, \\xHH escapes)."""
    body, out, i = value[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt == "x" and i + 3 < len(body):
                out.append(chr(int(body[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _scalar(value: str) -> Any:
    """One value as redis-cli --no-raw prints it."""
    value = value.strip()
    if value.startswith("(integer) "):
        return int(value.removeprefix("(integer) "))
    if value in ("(nil)",):
        return None
    if value == "(empty array)" or value == "(empty list or set)":
        return []
    if value.startswith('"') and value.endswith('"') and len(value) >= 2:
        return _unquote(value)
    return value


def parse_cli_noraw(output: str) -> list[Any]:
    """Rebuild the nested reply from `redis-cli --no-raw` output (`1) 1) (integer) 1`)."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines or (len(lines) == 1 and not _MARKER.match(lines[0])):
        value = _scalar(lines[0]) if lines else []
        return value if isinstance(value, list) else [value]
    root: list[Any] = []
    # Each open array remembers the column where its element markers end.
    stack: list[tuple[int | None, list[Any]]] = [(None, root)]
    for line in lines:
        pos, first = 0, True
        while match := _MARKER.match(line, pos):
            col = match.end()
            if first:
                while stack[-1][0] is not None and stack[-1][0] > col:
                    stack.pop()
                level_col, items = stack[-1]
                if level_col is None:
                    stack[-1] = (col, items)
                elif level_col != col:
                    raise ValueError(f"unexpected indentation in redis-cli output: {line!r}")
                items.append(None)
                first = False
            else:
                # A marker right after another one opens an array as that element.
                child: list[Any] = []
                stack[-1][1][-1] = child
                stack.append((col, child))
                child.append(None)
            pos = col
        if first:
            raise ValueError(f"no element marker in redis-cli output line: {line!r}")
        stack[-1][1][-1] = _scalar(line[pos:])
    return root


def parse_cli_json(output: str) -> list[Any]:
    """`redis-cli --json` output (arrays of strings and integers)."""
    return json.loads(output) if output.strip() else []


def _integer_lines(lines: list[str], start: int) -> int:
    """How many lines from `start` on hold an integer, in a row."""
    n = 0
    while start + n < len(lines) and lines[start + n].strip().lstrip("-").isdigit():
        n += 1
    return n


def parse_cli_raw_slowlog(output: str) -> list[list[Any]]:
    """`redis-cli SLOWLOG GET` raw output, one value per line with the nesting lost.

    Only 6- and 7-field entries can be told apart: the arguments end at the line holding the
    client address; after the client name the next entry starts with three integers (id,
    time, duration) before its command name, and Redis 8.10's 7th field (the argument count
    before truncation) is one integer more."""
    lines = output.splitlines()
    entries, i = [], 0
    while i < len(lines) and lines[i].strip():
        head = [int(lines[i]), int(lines[i + 1]), int(lines[i + 2])]
        j, extra = i + 3, 0
        while j < len(lines):
            if ADDRESS.match(lines[j]) and j + 1 < len(lines):
                after = j + 2
                run = _integer_lines(lines, after)
                at_end = not any(x.strip() for x in lines[after + run :])
                # 6 fields: the output ends, or the next entry's three integers follow;
                # 7 fields: one integer more, before either.
                if (run in (0, 1) and at_end) or run in (3, 4):
                    extra = run % 3
                    break
            j += 1
        else:
            raise ValueError("raw SLOWLOG output without a client address line")
        tail = lines[j + 2 : j + 2 + extra]  # the 7th field, if any
        entries.append([*head, lines[i + 3 : j], lines[j], lines[j + 1], *tail])
        i = j + 2 + extra
    return entries


def parse_cli_raw_latency_latest(output: str) -> list[list[Any]]:
    """`redis-cli LATENCY LATEST` raw output: four lines per event."""
    lines = [line for line in output.splitlines() if line.strip()]
    return [lines[i : i + 4] for i in range(0, len(lines) - 3, 4)]


def parse_cli_raw_latency_history(output: str) -> list[list[Any]]:
    """`redis-cli LATENCY HISTORY <event>` raw output: time and ms on alternate lines."""
    lines = [line for line in output.splitlines() if line.strip()]
    return [lines[i : i + 2] for i in range(0, len(lines) - 1, 2)]
