"""The server's own description of its commands, for redacting SLOWLOG arguments: key
positions from COMMAND INFO (key specs on 7.0+, first/last/step before) and the literal words
of each command's syntax from COMMAND DOCS (7.0+).

Only the commands named in a collection's entries are asked about, in one COMMAND INFO and
(7.0+) one COMMAND DOCS call; both are read commands (allow-listed by the read-only guard).
The parsing is pure: replies in, `CommandSpec`s out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import redis


@dataclass(frozen=True)
class KeySpec:
    """One COMMAND INFO key spec (7.0+): where the search starts, then how keys are found."""

    begin: str  # "index", "keyword" or "unknown"
    index: int = 0
    keyword: str = ""
    startfrom: int = 0
    find: str = "unknown"  # "range", "keynum" or "unknown"
    lastkey: int = 0
    keystep: int = 1
    limit: int = 0
    keynumidx: int = 0
    firstkey: int = 0


@dataclass(frozen=True)
class DocArg:
    """One argument of a COMMAND DOCS syntax tree."""

    name: str
    type: str  # string, integer, double, key, pattern, unix-time, pure-token, oneof, block
    token: str | None = None  # the literal word before the value (the value itself if pure)
    optional: bool = False
    multiple: bool = False
    multiple_token: bool = False  # the token is repeated before every value
    children: tuple[DocArg, ...] = ()


@dataclass(frozen=True)
class CommandSpec:
    """What the server says about one command or subcommand (`set`, `config|set`)."""

    name: str
    arity: int
    first_key: int
    last_key: int
    key_step: int
    key_specs: tuple[KeySpec, ...] | None = None  # None: the server has none (before 7.0)
    arguments: tuple[DocArg, ...] | None = None  # None: no COMMAND DOCS syntax for it
    subcommands: frozenset[str] = field(default_factory=frozenset)  # `set` of `config|set`


CommandTable = Mapping[str, CommandSpec]


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def _pairs(value: Any) -> dict[str, Any]:
    """A RESP2 flat [name, value, ...] list (or a RESP3 map) as a dict with text names."""
    if isinstance(value, Mapping):
        return {_text(k): v for k, v in value.items()}
    items = list(value or [])
    return {_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


def _key_spec(raw: Any) -> KeySpec:
    spec = _pairs(raw)
    begin, find = _pairs(spec.get("begin_search")), _pairs(spec.get("find_keys"))
    begin_args, find_args = _pairs(begin.get("spec")), _pairs(find.get("spec"))
    return KeySpec(
        begin=_text(begin.get("type", "unknown")),
        index=int(begin_args.get("index", 0)),
        keyword=_text(begin_args.get("keyword", "")),
        startfrom=int(begin_args.get("startfrom", 0)),
        find=_text(find.get("type", "unknown")),
        lastkey=int(find_args.get("lastkey", 0)),
        keystep=int(find_args.get("keystep", 1)),
        limit=int(find_args.get("limit", 0)),
        keynumidx=int(find_args.get("keynumidx", 0)),
        firstkey=int(find_args.get("firstkey", 0)),
    )


def _info_entries(raw: Any) -> list[CommandSpec]:
    """One COMMAND INFO element and its subcommands (7.0+ nests them in the 10th field)."""
    name = _text(raw[0]).lower()
    key_specs = tuple(_key_spec(s) for s in raw[8]) if len(raw) > 8 else None
    nested = [e for sub in raw[9] for e in _info_entries(sub)] if len(raw) > 9 and raw[9] else []
    subs = frozenset(e.name.split("|", 1)[1] for e in nested if e.name.startswith(f"{name}|"))
    spec = CommandSpec(
        name=name,
        arity=int(raw[1]),
        first_key=int(raw[3]),
        last_key=int(raw[4]),
        key_step=int(raw[5]),
        key_specs=key_specs,
        subcommands=subs,
    )
    return [spec, *nested]


def parse_command_info(
    reply: list[Any] | None, requested: Iterable[str] = ()
) -> dict[str, CommandSpec]:
    """COMMAND INFO name ...: specs by lower-case name, subcommands as `parent|sub`.
    The reply follows the request order (nil for an unknown name); a renamed command is
    filed under the name it was asked (and logged) by, as well as its own."""
    table: dict[str, CommandSpec] = {}
    asked = list(requested)
    for i, raw in enumerate(reply or []):
        if not raw:
            continue
        entries = _info_entries(raw)
        for spec in entries:
            table[spec.name] = spec
        if i < len(asked) and asked[i].lower() not in table:
            table[asked[i].lower()] = entries[0]
    return table


def _doc_arg(raw: Any) -> DocArg:
    arg = _pairs(raw)
    flags = {_text(f) for f in arg.get("flags") or []}
    token = arg.get("token")
    return DocArg(
        name=_text(arg.get("name", "")),
        type=_text(arg.get("type", "string")),
        token=_text(token) if token is not None else None,
        optional="optional" in flags,
        multiple="multiple" in flags,
        multiple_token="multiple_token" in flags,
        children=tuple(_doc_arg(c) for c in arg.get("arguments") or []),
    )


def _doc_entries(name: str, raw: Any) -> dict[str, tuple[DocArg, ...] | None]:
    doc = _pairs(raw)
    arguments = doc.get("arguments")
    out: dict[str, tuple[DocArg, ...] | None] = {
        name.lower(): tuple(_doc_arg(a) for a in arguments) if arguments is not None else None
    }
    for sub_name, sub_doc in _pairs(doc.get("subcommands")).items():
        out.update(_doc_entries(sub_name, sub_doc))
    return out


def parse_command_docs(reply: Any) -> dict[str, tuple[DocArg, ...] | None]:
    """COMMAND DOCS name ...: each command's (and subcommand's) argument tree by name; None
    where the docs hold no `arguments` (a command without any, or a module's undocumented
    command: either way no word of it is known to be a literal)."""
    out: dict[str, tuple[DocArg, ...] | None] = {}
    for name, doc in _pairs(reply).items():
        out.update(_doc_entries(name, doc))
    return out


def with_docs(
    info: Mapping[str, CommandSpec], docs: Mapping[str, tuple[DocArg, ...] | None]
) -> dict[str, CommandSpec]:
    """The specs with their syntax trees, where COMMAND DOCS gave one."""
    return {name: replace(spec, arguments=docs.get(name)) for name, spec in info.items()}


def fetch_command_table(client: redis.Redis, names: Iterable[str]) -> dict[str, CommandSpec] | None:
    """COMMAND INFO (and on 7.0+ COMMAND DOCS) for `names` (command names as logged: the
    container's name is enough, its subcommands come with it). None when COMMAND INFO
    cannot be read (an ACL without `command`, a renamed COMMAND, a failed connection): the
    caller then keeps nothing but command names. COMMAND DOCS unreadable leaves the key
    positions without the syntax."""
    asked = sorted({n.lower() for n in names if n})
    if not asked:
        return {}
    try:
        # "COMMAND INFO" as one word: redis-py splits it when packing, and no reply callback
        # (redis-py has one for bare COMMAND) reshapes the reply.
        reply = client.execute_command("COMMAND INFO", *asked)
    except redis.exceptions.RedisError:  # refused, renamed away, or the connection failed
        return None
    info = parse_command_info(reply, asked)
    if not any(spec.key_specs is not None for spec in info.values()):
        return info  # before 7.0: no key specs, no COMMAND DOCS
    try:
        docs = parse_command_docs(client.execute_command("COMMAND DOCS", *asked))
    except redis.exceptions.RedisError:
        return info
    return with_docs(info, docs)
