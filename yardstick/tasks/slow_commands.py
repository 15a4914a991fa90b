"""O(N) commands on fixture data (scratch only): LRANGE 0 -1, HGETALL, KEYS, SORT ... LIMIT.

Each duration is read from the SLOWLOG entry of that very command (same connection name,
same arguments, an id newer than the last one seen), with slowlog-log-slower-than lowered to
0 for the experiment and set back afterwards. The GET baseline comes from the commandstats
difference around many GETs: the same server-side clock (the execution time `call()`
measures feeds both), with more resolution than one 1-2 µs SLOWLOG entry."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import pyarrow as pa
from pydantic import BaseModel, ConfigDict
from redis.client import NEVER_DECODE

from yardstick import interrupt
from yardstick.access.connect import client_name, open_client
from yardstick.access.environment import Environment
from yardstick.access.info import parse_commandstats
from yardstick.access.scratch import (
    build_hash,
    build_list,
    build_strings,
    config_changes,
    fixture_keys,
    require_scratch,
)
from yardstick.tasks import base
from yardstick.tasks.base import UTC_TS, Family, Measured, utc_now
from yardstick.tasks.slowlog import (
    SPAN_SCHEMA,
    SlowlogSpan,
    find_own_entry,
    server_identity,
    slowlog_span,
)


class SlowCommandsProfile(BaseModel):
    """O(N) commands on fixture data (scratch only); the seed's sizes are the nightly ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    list_len: int = 20_000
    hash_fields: int = 5_000
    string_keys: int = 10_000
    repetitions: int = 3
    # GETs whose commandstats difference gives the per-GET baseline of the same run.
    get_calls: int = 200


# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # The SLOWLOG ids and time the experiment occupied (slowlog.SPAN_SCHEMA).
    "slow_commands_span": SPAN_SCHEMA,
    # O(N) commands: one row per command per repetition, duration from its SLOWLOG entry.
    "slow_commands": pa.schema(
        [
            ("command", pa.string()),  # lrange_all | hgetall | keys_pattern | sort_alpha_limit
            ("args", pa.string()),
            ("rep_idx", pa.int32()),
            ("n_elements", pa.int64()),  # N: list length, hash fields, keys in the database
            ("returned", pa.int64()),  # M: elements in the reply
            ("entry_id", pa.int64()),  # null when no matching entry was found
            ("duration_us", pa.int64()),
            ("client_us", pa.float64()),  # timed from outside, reply transfer included
            ("logged_at", UTC_TS),
        ]
    ),
    # GET counters before and after `calls_sent` GETs: the per-GET baseline of the run.
    "slow_commands_baseline": pa.schema(
        [
            ("phase", pa.string()),  # before | after
            ("command", pa.string()),
            ("taken_at", UTC_TS),
            ("calls_sent", pa.int64()),
            ("calls", pa.int64()),
            ("usec", pa.int64()),
        ]
    ),
}


ROLE = "slow-commands"


def commands(prefix: str) -> list[tuple[str, list[str]]]:
    """(label, arguments) of the four O(N) commands over the fixture keys."""
    key_list, key_hash = f"{prefix}list", f"{prefix}hash"
    return [
        ("lrange_all", ["LRANGE", key_list, "0", "-1"]),
        ("hgetall", ["HGETALL", key_hash]),
        # Matches about a ninth of the string keys; KEYS walks every key in the database.
        ("keys_pattern", ["KEYS", f"{prefix}str:9*"]),
        # Returns ten elements, yet sorts all of them: LIMIT reduces M, not N.
        ("sort_alpha_limit", ["SORT", key_list, "ALPHA", "LIMIT", "0", "10"]),
    ]


def _get_counters(client, phase: str, calls: int) -> dict:
    """The `get` commandstats line as a row (zero when GET was never called)."""
    stats = {s.command: s for s in parse_commandstats(client.info("commandstats"))}
    get = stats.get("get")
    return {
        "phase": phase,
        "command": "get",
        "taken_at": utc_now(),
        "calls_sent": calls,
        "calls": get.calls if get else 0,
        "usec": get.usec if get else 0,
    }


def _run_repetitions(
    client,
    profile: SlowCommandsProfile,
    prefix: str,
    sizes: dict,
    rows: list[dict],
    on_repetition: Callable[[int], None],
) -> None:
    """Run each command `repetitions` times (interleaved) and match its SLOWLOG entry,
    appending to `rows`; `on_repetition(len(rows))` after each whole repetition. A
    repetition starts only when it can finish within the family's bound."""
    last_id = None
    name = client_name(ROLE)
    longest_s: float | None = None
    for rep_idx in range(profile.repetitions):
        interrupt.check()
        if not interrupt.fits(longest_s):
            base.progress().skip("repetition", interrupt.wont_fit())
            continue
        rep_start = time.perf_counter()
        for label, args in commands(prefix):
            start = time.perf_counter_ns()
            # Raw bytes: decoding a 200,000-element reply would only time the client.
            reply = client.execute_command(*args, **{NEVER_DECODE: True})
            client_us = (time.perf_counter_ns() - start) / 1000
            entry = find_own_entry(client, args, name, last_id)
            if entry is not None:
                last_id = entry.entry_id
            # redis-py turns HGETALL's flat reply into a dict; the others stay lists.
            returned = len(reply) if isinstance(reply, list | dict) else None
            rows.append(
                {
                    "command": label,
                    "args": " ".join(args),
                    "rep_idx": rep_idx,
                    "n_elements": sizes[label],
                    "returned": returned,
                    "entry_id": entry.entry_id if entry else None,
                    "duration_us": entry.duration_us if entry else None,
                    "client_us": client_us,
                    "logged_at": utc_now(),
                }
            )
        longest_s = max(longest_s or 0.0, time.perf_counter() - rep_start)
        on_repetition(len(rows))


def slow_commands(env: Environment, profile: SlowCommandsProfile) -> Measured:
    """Build the fixtures, time the four O(N) commands from the SLOWLOG, remove the fixtures."""
    require_scratch(env)
    client = open_client(env, ROLE)
    rows: list[dict] = []
    progress = base.progress()
    progress.plan(profile.repetitions, "repetitions")

    def finished(count: int, window_s: float) -> Measured:
        """The Measured of the first `count` rows (whole repetitions; once the span closed)."""
        return _measured(rows[:count], baseline, span, window_s)

    def on_repetition(count: int) -> None:
        progress.finished(functools.partial(finished, count, time.perf_counter() - start))

    try:
        identity = server_identity(client)
        with fixture_keys(client, env) as prefix:
            build_list(client, f"{prefix}list", profile.list_len)
            build_hash(client, f"{prefix}hash", profile.hash_fields)
            build_strings(client, f"{prefix}str:", profile.string_keys)
            dbsize = client.dbsize()
            sizes = {
                "lrange_all": profile.list_len,
                "hgetall": profile.hash_fields,
                "keys_pattern": dbsize,
                "sort_alpha_limit": profile.list_len,
            }
            # GETs before the threshold drops: at 0 each would take a SLOWLOG slot.
            baseline = [_get_counters(client, "before", 0)]
            for i in range(profile.get_calls):
                client.execute_command("GET", f"{prefix}str:{i % profile.string_keys}")
            baseline.append(_get_counters(client, "after", profile.get_calls))
            with slowlog_span(client, "slow_commands", identity.run_id) as span:
                with config_changes(client, env, {"slowlog-log-slower-than": 0}):
                    start = time.perf_counter()
                    _run_repetitions(client, profile, prefix, sizes, rows, on_repetition)
                    window_s = time.perf_counter() - start
    finally:
        client.close()
    return _measured(rows, baseline, span, window_s)


def _measured(
    rows: list[dict], baseline: list[dict], span: SlowlogSpan, window_s: float
) -> Measured:
    """The family's Measured of these rows (whole repetitions), the GET baseline, the span."""
    return Measured(
        tables={
            "slow_commands": FAMILY.table("slow_commands", rows),
            "slow_commands_baseline": FAMILY.table("slow_commands_baseline", baseline),
            "slow_commands_span": FAMILY.table("slow_commands_span", [span.row()]),
        },
        window_s=window_s,
    )


FAMILY = Family(
    name="slow_commands",
    phase="experiments",
    scope="experiment",
    measure=slow_commands,
    arguments=lambda env, profile, ctx: (env, profile.slow_commands),
    tables=TABLES,
    settings=SlowCommandsProfile,
    presets={
        "nightly": SlowCommandsProfile(
            list_len=200_000,
            hash_fields=50_000,
            string_keys=100_000,
            repetitions=7,
            get_calls=1000,
        )
    },
    scratch_only=True,
)
