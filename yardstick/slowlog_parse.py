"""SLOWLOG GET and LATENCY replies: entries of every known shape, argument redaction, and the
text redis-cli prints (JSON, --no-raw, raw) so that captured outputs parse like live replies."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

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
# Commands whose second word is not a key (it may be a message or a secret).
NO_KEY_COMMANDS = frozenset({"auth", "echo", "hello", "ping", "publish", "select", "spublish"})
SCRIPT_COMMANDS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})
# Option words: they describe what the command does, not the data it carries.
KEYWORDS = frozenset(
    {
        "ALPHA",
        "ASC",
        "DESC",
        "LIMIT",
        "BY",
        "GET",
        "STORE",
        "NOSORT",
        "MATCH",
        "COUNT",
        "TYPE",
        "NOVALUES",
        "WITHSCORES",
        "WITHVALUES",
        "BYSCORE",
        "BYLEX",
        "REV",
        "EX",
        "PX",
        "EXAT",
        "PXAT",
        "KEEPTTL",
        "PERSIST",
        "NX",
        "XX",
        "GT",
        "LT",
        "CH",
        "INCR",
        "LEFT",
        "RIGHT",
        "BEFORE",
        "AFTER",
        "RANK",
        "MAXLEN",
        "IDX",
        "LEN",
        "MINMATCHLEN",
        "WITHMATCHLEN",
        "SAMPLES",
        "AGGREGATE",
        "WEIGHTS",
        "SUM",
        "MIN",
        "MAX",
        "BLOCK",
        "STREAMS",
        "GROUP",
        "NOACK",
        "IDLE",
        "TIME",
        "RETRYCOUNT",
        "FORCE",
        "JUSTID",
        "WITHCODE",
        "ANY",
        "COPY",
        "REPLACE",
        "ABSTTL",
        "FREQ",
        "DB",
        "FIELDS",
        "FNX",
        "FXX",
    }
)
# After these option words the next argument is a key or a key pattern, kept like a key.
KEEP_NEXT = frozenset({"MATCH", "TYPE", "BY", "GET", "STORE"})
# Small integers (ranges, counts, LIMIT offsets) say what a command costs, not what it stores.
SMALL_INT = re.compile(r"^-?\d{1,6}$")
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


def _redacted(arg: str) -> str:
    """An argument replaced by its length in bytes (Redis's truncation counted back in)."""
    match = MORE_BYTES.match(arg)
    if match:
        size = len(match.group(1).encode("utf-8", errors="surrogateescape")) + int(match.group(2))
    else:
        size = len(arg.encode("utf-8", errors="surrogateescape"))
    return f"<{size} bytes>"


def _kept_positions(args: tuple[str, ...] | list[str]) -> set[int]:
    """Positions that are the command, its subcommand, or its (first) key."""
    name = args[0].lower()
    kept = {0}
    if name in CONTAINER_COMMANDS:
        kept |= {1, 2}
    elif name in SCRIPT_COMMANDS:
        # Script or function name, numkeys, then the keys; the values after stay hidden.
        kept |= {1, 2}
        numkeys = int(args[2]) if len(args) > 2 and args[2].isdigit() else 0
        kept |= set(range(3, 3 + numkeys))
    elif name not in NO_KEY_COMMANDS:
        kept.add(1)
    return kept


def redact(args: tuple[str, ...] | list[str]) -> list[str]:
    """Keep command, key, option words and small integers; replace values by their length."""
    if not args:
        return []
    kept = _kept_positions(args)
    out: list[str] = []
    keep_next = False
    for position, arg in enumerate(args):
        word = arg.upper()
        if position in kept or keep_next or MORE_ARGS.match(arg):
            out.append(arg)
        elif word in KEYWORDS or SMALL_INT.match(arg):
            out.append(arg)
        else:
            out.append(_redacted(arg))
        keep_next = position not in kept and word in KEEP_NEXT and not keep_next
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
