"""SLOWLOG collection: read every entry each time, on every environment (read-only too), and
land those the lake does not hold yet.

Deduplication across collections, lost entries and the tool's own share are derived in SQL
(yardstick/sql/models/marts/slowlog/); this task lands what the server said, with arguments redacted
unless asked: by the server's own description of the commands logged
(yardstick.access.command_meta), read once per collection for the command names landed. The
collection row carries the queue's oldest and newest ids, so losses need no entry landed twice;
entries at or below the cursor (the highest id complete runs landed for this server run,
yardstick/tasks/base.Landed) are left out."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import redis
from pydantic import BaseModel, ConfigDict
from redis.client import NEVER_DECODE

from yardstick import CLIENT_NAME_PREFIX
from yardstick.access.command_meta import CommandTable, fetch_command_table
from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.info import parse_commandstats, parse_info
from yardstick.access.slowlog_parse import SlowlogEntry, parse_slowlog, redact
from yardstick.tasks.base import UTC_TS, Family, Landed, Measured, utc_now
from yardstick.tasks.fingerprint import server_product


class SlowlogProfile(BaseModel):
    """SLOWLOG collection (every environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Arguments are redacted (command and key kept, values replaced by their length)
    # unless this is set: application values can be personal data.
    keep_args: bool = False


# SLOWLOG ids and time each scratch experiment occupied (not application entries): every
# experiment family lands one as `<family>_span`, as a run lands one file per table.
SPAN_SCHEMA = pa.schema(
    [
        ("family", pa.string()),
        ("server_run_id", pa.string()),
        ("started_at", UTC_TS),
        ("finished_at", UTC_TS),
        ("first_entry_id", pa.int64()),
        ("last_entry_id", pa.int64()),
    ]
)

# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # One row per SLOWLOG collection: what decides which entries get in and how long
    # they stay; ids, dedup and losses are derived in yardstick/sql/030.
    "slowlog_collections": pa.schema(
        [
            ("server_run_id", pa.string()),  # ids restart with the server process
            ("redis_version", pa.string()),
            # The product and its own version from INFO server (valkey 8.1.8, where
            # redis_version says 7.2.4): named before any fingerprint of the server is in.
            ("server_product", pa.string()),
            ("server_version", pa.string()),
            ("uptime_s", pa.int64()),
            ("collected_at", UTC_TS),
            ("slowlog_len", pa.int64()),
            ("slowlog_max_len", pa.int64()),  # null where CONFIG is unavailable
            ("log_slower_than_us", pa.int64()),
            ("count_requested", pa.int64()),  # -1 on 7.0+, a large count before
            ("entries_returned", pa.int64()),
            ("args_redacted", pa.bool_()),
            ("tool_client_prefix", pa.string()),  # client names that mark the tool
            ("read_s", pa.float64()),
            # SLOWLOG RESET calls in INFO commandstats (null before 7.0 or unreadable).
            ("slowlog_reset_calls", pa.int64()),
            # An empty log only: the id of its next entry (0), null when a RESET or a
            # max-len of 0 may have emptied it; the basis says why (yardstick/tasks/slowlog.py).
            ("empty_log_next_id", pa.int64()),
            ("empty_log_basis", pa.string()),
            # The queue as read: its oldest and newest entry ids (null: empty), whatever was
            # landed; the losses are counted from these (files before them: from the entries).
            ("oldest_queued_id", pa.int64()),
            ("newest_queued_id", pa.int64()),
            # Only entries above this id were landed: the lake held the rest (null: no cursor,
            # every entry read was landed).
            ("landed_above_id", pa.int64()),
        ]
    ),
    # The entries each collection landed: those above its cursor (an entry recurs after a
    # lost cursor, or in a run started before the collection that landed it; SQL
    # deduplicates).
    "slowlog_entries": pa.schema(
        [
            ("server_run_id", pa.string()),
            ("entry_id", pa.int64()),
            ("logged_at", UTC_TS),
            ("duration_us", pa.int64()),
            ("command", pa.string()),  # `sort`, `config|get`
            ("args", pa.list_(pa.string())),  # values replaced by `<N bytes>` if redacted
            ("args_redacted", pa.bool_()),
            ("arg_count", pa.int32()),
            ("arg_count_original", pa.int32()),  # 7th field, Redis 8.10+
            ("complexity", pa.string()),  # Redis Enterprise's extra field
            ("client_addr", pa.string()),
            ("client_name", pa.string()),
            ("entry_fields", pa.int8()),  # 4, 6 or 7
        ]
    ),
}


log = logging.getLogger(__name__)

# Before 7.0 there is no "-1 = everything": a count far above any slowlog-max-len does it.
READ_ALL_COUNT_BEFORE_7 = 1_000_000


@dataclass(frozen=True)
class ServerIdentity:
    """Which server process answered: ids restart with it, counters too."""

    run_id: str
    version: tuple[int, ...]
    version_text: str
    uptime_s: int
    product: str = "redis"  # server_name / valkey_version: "valkey" on Valkey
    product_version: str = ""  # the product's own (Valkey 8.1.8, not redis_version 7.2.4)


def server_identity(client: redis.Redis) -> ServerIdentity:
    """INFO server's run_id, version and uptime."""
    server = parse_info(client.info("server")).get("server", {})
    version_text = server.get("redis_version", "0.0.0")
    version = tuple(int(p) for p in version_text.split(".") if p.isdigit())
    uptime_s = int(server.get("uptime_in_seconds", 0) or 0)
    run_id = server.get("run_id", "")
    if not run_id:
        # Some managed services hide run_id: the start minute stands in for it (a restart
        # changes it; a rare minute boundary only starts a new series, never a false loss).
        run_id = f"started-{(int(time.time()) - uptime_s) // 60}"
    product = server_product(server)
    return ServerIdentity(
        run_id=run_id,
        version=version,
        version_text=version_text,
        uptime_s=uptime_s,
        product=product["name"],
        product_version=product["version"] or version_text,
    )


def config_value(client: redis.Redis, key: str) -> int | None:
    """A numeric CONFIG GET value, or None where CONFIG is renamed or forbidden."""
    try:
        value = client.config_get(key).get(key)
    except redis.exceptions.ResponseError:
        return None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# Where an empty log stands (the id the next entry gets), and why it is believed: entry ids
# come from a per-process counter starting at 0 that SLOWLOG RESET does not rewind, and
# entries leave only when the queue exceeds slowlog-max-len (src/slowlog.c). An empty log
# therefore means "next id 0" unless a RESET (or a max-len of 0) emptied it.
# Believed: no SLOWLOG command of any kind since the counters started, or (7.0+, where
# commandstats count subcommands apart) no SLOWLOG RESET.
NEXT_ID_VERIFIED = ("no_slowlog_calls", "no_reset_calls")
# Assumed, to be confirmed by the next collection: commandstats unreadable, zeroed by CONFIG
# RESETSTAT since (7.0+: its own call is counted after the reset), or before 7.0 (one
# `cmdstat_slowlog` line for GET, LEN and RESET alike).
NEXT_ID_UNVERIFIED = ("no_commandstats", "counters_reset", "slowlog_calls_before_7")
# Unknown: a RESET was called, the log emptied while being read, or max-len is 0 (before
# 7.4 every entry then takes an id and is dropped at once).
NEXT_ID_UNKNOWN = ("reset_calls", "emptied_while_read", "max_len_zero")


@dataclass(frozen=True)
class SlowlogCalls:
    """SLOWLOG calls INFO commandstats counted since the counters started (restart or
    CONFIG RESETSTAT): all subcommands, and RESET apart where the server tells it (7.0+)."""

    calls: int
    reset_calls: int | None  # None before 7.0: subcommands are not counted apart
    resetstat_calls: int | None  # CONFIG RESETSTAT (7.0+): earlier counts were erased


def slowlog_calls(client: redis.Redis, version: tuple[int, ...]) -> SlowlogCalls | None:
    """SLOWLOG calls from INFO commandstats, or None where the section cannot be read.
    From 7.0 on commandstats count subcommands apart (`slowlog|reset`), before 7.0 as one
    `slowlog` line; a line appears only once its command has been called."""
    try:
        stats = parse_commandstats(client.info("commandstats"))
    except redis.exceptions.ResponseError:
        return None
    calls = {s.command: s.calls for s in stats}
    split = version >= (7, 0) or any("|" in c for c in calls)
    total = sum(n for c, n in calls.items() if c == "slowlog" or c.startswith("slowlog|"))
    return SlowlogCalls(
        calls=total,
        reset_calls=calls.get("slowlog|reset", 0) if split else None,
        resetstat_calls=calls.get("config|resetstat", 0) if split else None,
    )


def empty_log_next_id(
    calls: SlowlogCalls | None, max_len: int | None, length: int
) -> tuple[int | None, str]:
    """For a log read empty: the id its next entry gets (None: unknown), and the basis."""
    if length:
        return None, "emptied_while_read"  # LEN saw entries, GET none: a RESET in between
    if max_len == 0:
        return None, "max_len_zero"
    if calls is None:
        return 0, "no_commandstats"
    if calls.reset_calls:
        return None, "reset_calls"
    if calls.resetstat_calls:
        return 0, "counters_reset"
    if calls.calls == 0:
        return 0, "no_slowlog_calls"
    if calls.reset_calls is None:
        return 0, "slowlog_calls_before_7"
    return 0, "no_reset_calls"


def read_entries(
    client: redis.Redis, identity: ServerIdentity, count: int | None = None
) -> list[SlowlogEntry]:
    """SLOWLOG GET: all entries when count is None (-1 on 7.0+, a large count before)."""
    if count is None:
        count = -1 if identity.version >= (7, 0) else READ_ALL_COUNT_BEFORE_7
    # Separate words keep redis-py's SLOWLOG GET callback (which joins arguments) out of the
    # way; raw bytes keep binary arguments from failing the decoding.
    reply = client.execute_command("SLOWLOG", "GET", count, **{NEVER_DECODE: True})
    return parse_slowlog(reply)


def newest_entry_id(client: redis.Redis) -> int | None:
    """Id of the newest SLOWLOG entry, or None when the log is empty."""
    entries = parse_slowlog(client.execute_command("SLOWLOG", "GET", 1, **{NEVER_DECODE: True}))
    return entries[0].entry_id if entries else None


def find_own_entry(
    client: redis.Redis,
    args: list[str],
    client_name: str,
    after_id: int | None,
    look_back: int = 16,
) -> SlowlogEntry | None:
    """The newest entry for exactly `args`, sent by `client_name`, logged after `after_id`:
    the entry of the command just run on this connection (matched, not guessed)."""
    for entry in parse_slowlog(
        client.execute_command("SLOWLOG", "GET", look_back, **{NEVER_DECODE: True})
    ):
        if after_id is not None and entry.entry_id <= after_id:
            break
        # Servers before 4.0 log no client name: the arguments alone must then match.
        if list(entry.args) == args and entry.client_name in (client_name, None):
            return entry
    return None


def entry_row(
    entry: SlowlogEntry, server_run_id: str, keep_args: bool, commands: CommandTable | None = None
) -> dict:
    """One lake row for a SLOWLOG entry; unless `keep_args`, its arguments redacted by the
    server's command metadata (`commands`; None: none could be read, only names are kept)."""
    args = list(entry.args) if keep_args else redact(entry.args, commands, entry.arg_count_original)
    return {
        "server_run_id": server_run_id,
        "entry_id": entry.entry_id,
        "logged_at": datetime.fromtimestamp(entry.logged_at_s, UTC),
        "duration_us": entry.duration_us,
        "command": entry.command,
        "args": args,
        "args_redacted": not keep_args,
        "arg_count": len(entry.args),
        "arg_count_original": entry.arg_count_original,
        "complexity": entry.complexity,
        "client_addr": entry.client_addr,
        "client_name": entry.client_name,
        "entry_fields": entry.entry_fields,
    }


@dataclass
class SlowlogSpan:
    """The SLOWLOG ids and time an experiment occupied, so that SQL does not count the
    entries it produced (and the queue then dropped) as application entries lost."""

    family: str
    server_run_id: str
    started_at: datetime
    before_id: int | None
    finished_at: datetime | None = None
    last_id: int | None = None

    def row(self) -> dict:
        """The lake row: ids after `before_id` up to `last_id` belong to the experiment."""
        before = -1 if self.before_id is None else self.before_id
        return {
            "family": self.family,
            "server_run_id": self.server_run_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "first_entry_id": None if self.last_id is None else before + 1,
            "last_entry_id": self.last_id,
        }


@contextmanager
def slowlog_span(client: redis.Redis, family: str, server_run_id: str) -> Iterator[SlowlogSpan]:
    """Record the newest SLOWLOG id before and after the block."""
    span = SlowlogSpan(family, server_run_id, utc_now(), newest_entry_id(client))
    try:
        yield span
    finally:
        span.finished_at = utc_now()
        try:
            last = newest_entry_id(client)
            span.last_id = last if last is not None and last != span.before_id else None
        except redis.RedisError:
            span.last_id = None


def landing_cursor(
    landed: Landed | None, server_run_id: str, entries: list[SlowlogEntry]
) -> int | None:
    """The id above which entries are landed (None: land them all): the highest id complete
    runs landed for this server run, unless the queue says it belongs to another series."""
    cursor = landed.slowlog_ids.get(server_run_id) if landed is not None else None
    if cursor is None or not entries:
        return cursor
    # Ids only grow within a server process (RESET does not rewind them): a newest id below
    # the cursor is another process under the same run id (the start-minute stand-in).
    return cursor if max(e.entry_id for e in entries) >= cursor else None


def collect_slowlog(
    env: Environment, profile: SlowlogProfile, landed: Landed | None = None
) -> Measured:
    """Read every SLOWLOG entry with the settings that decide what gets in and how long it
    stays, and keep the entries above what the lake holds (`landed`; None: keep all); read
    commands only, so it runs on read-only environments too."""
    client = open_client(env, "slowlog")
    try:
        start = time.perf_counter()
        identity = server_identity(client)
        max_len = config_value(client, "slowlog-max-len")
        slower_than_us = config_value(client, "slowlog-log-slower-than")
        # Before the SLOWLOG reads below, so that this collection's own calls are not counted.
        calls = slowlog_calls(client, identity.version)
        length = int(client.execute_command("SLOWLOG", "LEN"))
        count = -1 if identity.version >= (7, 0) else READ_ALL_COUNT_BEFORE_7
        # The whole queue still: its oldest id tells what was lost since the last collection.
        entries = read_entries(client, identity, count)
        collected_at = utc_now()
        read_s = time.perf_counter() - start
        cursor = landing_cursor(landed, identity.run_id, entries)
        kept = [e for e in entries if cursor is None or e.entry_id > cursor]
        commands = None
        if kept and not profile.keep_args:
            commands = fetch_command_table(client, (e.args[0] for e in kept if e.args))
            if commands is None:
                log.warning(
                    "%s: COMMAND INFO unreadable: SLOWLOG arguments redacted, names kept",
                    env.name,
                )
    finally:
        client.close()
    next_id, basis = empty_log_next_id(calls, max_len, length) if not entries else (None, None)
    collection = {
        "server_run_id": identity.run_id,
        "redis_version": identity.version_text,
        "server_product": identity.product,
        "server_version": identity.product_version,
        "uptime_s": identity.uptime_s,
        "collected_at": collected_at,
        "slowlog_len": length,
        "slowlog_max_len": max_len,
        "log_slower_than_us": slower_than_us,
        "count_requested": count,
        "entries_returned": len(entries),
        "args_redacted": not profile.keep_args,
        "tool_client_prefix": CLIENT_NAME_PREFIX,
        "read_s": read_s,
        "slowlog_reset_calls": calls.reset_calls if calls else None,
        "empty_log_next_id": next_id,
        "empty_log_basis": basis,
        "oldest_queued_id": min((e.entry_id for e in entries), default=None),
        "newest_queued_id": max((e.entry_id for e in entries), default=None),
        "landed_above_id": cursor,
    }
    rows = [entry_row(e, identity.run_id, profile.keep_args, commands) for e in kept]
    return Measured(
        # Landed in this order: a collection row in the lake means its entries are there too
        # (the next cursor is read from collection rows; a landing that fails stops there).
        tables={
            "slowlog_entries": FAMILY.table("slowlog_entries", rows),
            "slowlog_collections": FAMILY.table("slowlog_collections", [collection]),
        },
        notes=[landed.problem] if landed is not None and landed.problem else [],
    )


FAMILY = Family(
    name="slowlog",
    phase="collection",
    measure=collect_slowlog,
    retries=1,
    retry_delay_s=1.0,
    # What the lake holds is read here, when the family starts (the host's lock held).
    arguments=lambda env, profile, ctx: (env, profile.slowlog, ctx.landed_of(env)),
    tables=TABLES,
    settings=SlowlogProfile,
    collected=True,
)
