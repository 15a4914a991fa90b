"""What a measurement changes on a scratch server, undone on the way out even when it fails
halfway: every CONFIG SET is set back, every fixture key removed. Read-only environments
are refused here before anything is sent.

A run killed outright (kill -9) undoes nothing, so each CONFIG SET is first recorded as an
intent on the server itself; `recover`, at the start of the next run, sets back what such a
run left and says so."""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import socket
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import redis
from redis.crc import key_slot

from yardstick.access.environment import Environment

# Every key the tool writes starts with this; cleanup removes exactly these keys and never
# flushes a database (a scratch server may hold someone else's keys too). On a cluster node
# the node's hash tag follows (`yardstick:fixture:{yst2}:`), so every fixture key routes to
# a slot that node serves (fixture_prefix).
FIXTURE_PREFIX = "yardstick:fixture:"
# A hash in the client's database: one field per setting changed by a block still open (or
# by a run that died inside one), its value the JSON intent (`from`, `to`, `at`, `pid`, `host`).
# On a cluster node it carries the node's tag (intent_key): `yardstick:intent:{yst2}:config`.
INTENT_KEY = "yardstick:intent:config"
# Pipelined batch size when building fixtures: large enough to be quick, small enough that
# no single command stalls the server (and lands in the SLOWLOG) for long.
BATCH = 1000


log = logging.getLogger(__name__)


def fixture_prefix(env: Environment) -> str:
    """The prefix of the fixture keys the tool writes on `env`: FIXTURE_PREFIX, followed on a
    cluster node by its hash tag so that the keys live on that node (no MOVED)."""
    return f"{FIXTURE_PREFIX}{env.key_tag}:" if env.key_tag else FIXTURE_PREFIX


def intent_key(env: Environment) -> str:
    """The key holding `env`'s CONFIG SET intents: INTENT_KEY, tagged on a cluster node (a
    CONFIG SET changes that node only, so its record lives there too)."""
    return f"yardstick:intent:{env.key_tag}:config" if env.key_tag else INTENT_KEY


class NotScratch(Exception):
    """A change was asked of an environment that is not scratch."""


class RestoreFailed(Exception):
    """A changed setting could not be set back: the server is no longer as it was found."""


def require_scratch(env: Environment) -> None:
    """Refuse, before sending anything, to change an environment that is not scratch."""
    if env.mode != "scratch":
        raise NotScratch(f"environment {env.name!r} is {env.mode}: the tool never changes it")


@contextmanager
def config_changes(
    client: redis.Redis, env: Environment, changes: dict[str, str | int]
) -> Iterator[dict[str, str]]:
    """CONFIG SET each change for the block; yield the previous values, set back afterwards.

    Each change is recorded as an intent (INTENT_KEY) before it is made, and forgotten once
    set back, so a run killed inside the block leaves what `recover` needs."""
    require_scratch(env)
    key = intent_key(env)
    original: dict[str, str] = {}
    # Intents this block recorded; an intent already there belongs to an enclosing block or
    # to a run that died (whose `from` is the true original): left for its owner/`recover`.
    recorded: list[str] = []
    try:
        for setting, value in changes.items():
            before = client.config_get(setting)
            if setting not in before:
                raise ValueError(f"CONFIG GET {setting}: this server has no such setting")
            # Recorded before the SET, so a SET that fails halfway is still undone.
            original[setting] = str(before[setting])
            intent = _intent(original[setting], str(value))
            if client.hsetnx(key, setting, json.dumps(intent)):
                recorded.append(setting)
            client.config_set(setting, value)
            if setting in recorded:
                # As the server reports it back (e.g. 1mb -> 1048576): what `recover` compares.
                intent["to"] = str(client.config_get(setting).get(setting, value))
                client.hset(key, setting, json.dumps(intent))
        yield dict(original)
    finally:
        restore_config(client, original, forget=recorded, intents=key)


def _intent(before: str, after: str) -> dict[str, str | int]:
    """What a CONFIG SET about to be made is recorded as."""
    return {
        "from": before,
        "to": after,
        "at": _utc_now_iso(),
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }


def _utc_now_iso() -> str:
    """Now, UTC, to the second: 2026-12-01T03:00:00Z."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def restore_config(
    client: redis.Redis,
    original: dict[str, str],
    forget: Collection[str] = (),
    intents: str = INTENT_KEY,
) -> None:
    """Set each setting back and read it again; raise RestoreFailed naming what differs.
    The intents of `forget` are deleted from hash `intents` once their setting is back (the
    hash vanishes when empty); a setting not set back keeps its intent, for `recover`."""
    problems: list[str] = []
    for key, value in reversed(list(original.items())):
        try:
            client.config_set(key, value)
            now = str(client.config_get(key).get(key))
            if now != value:
                problems.append(f"{key} is {now!r}, was {value!r}")
            elif key in forget:
                client.hdel(intents, key)
        except redis.RedisError as exc:
            problems.append(f"{key} not restored to {value!r}: {exc}")
    if problems:
        raise RestoreFailed("scratch server left changed: " + "; ".join(problems))


def recover(client: redis.Redis, env: Environment) -> list[str]:
    """Undo what an interrupted run left on this scratch server (in the client's database):
    settings it changed, fixture keys it loaded (tagged or not). Return one note per thing
    undone or left alone on purpose; an empty list when nothing was left."""
    require_scratch(env)
    notes: list[str] = []
    key = intent_key(env)
    for setting, text in sorted(client.hgetall(key).items()):
        note = _recover_setting(client, setting, text)
        if note:
            notes.append(note)
        client.hdel(key, setting)
    removed = remove_fixture_keys(client, by_slot=env.cluster)
    if removed:
        notes.append(_fixture_note(removed))
    for note in notes:
        log.warning("environment %r: %s", env.name, note)
    return notes


def _recover_setting(client: redis.Redis, setting: str, text: str) -> str | None:
    """Set one setting back to its intent's `from` if it is still at the intent's `to`; the
    note saying what was done (None when it was already back)."""
    try:
        intent = json.loads(text)
        before, after = str(intent["from"]), str(intent["to"])
    except (ValueError, TypeError, KeyError):
        return f"dropped an unreadable record of a change to {setting} (left as it is)"
    by = (
        f"an interrupted run at {intent.get('at', '?')} (pid {intent.get('pid', '?')} "
        f"on host {intent.get('host', '?')})"
    )
    now = client.config_get(setting).get(setting)
    if now is None:
        return f"dropped the record of a change to {setting} by {by}: no such setting now"
    now = str(now)
    if now == before:
        return None  # set back already (the run died after restoring, before forgetting)
    if now != after:
        return (
            f"left {setting} at {now}: {by} had set it from {before} to {after}, and it "
            f"has changed since (server restarted or set by someone else)"
        )
    client.config_set(setting, before)
    check = str(client.config_get(setting).get(setting))
    if check != before:
        # The intent stays (the caller deletes it only after this returns).
        raise RestoreFailed(
            f"{setting} left at {after} by {by}: set back to {before!r}, "
            f"the server reports {check!r}"
        )
    return f"set {setting} back to {before} (left at {after} by {by})"


def _fixture_note(removed: int) -> str:
    """The sentence about fixture keys an interrupted run left."""
    keys = f"{removed} fixture key" + ("" if removed == 1 else "s")
    return f"removed {keys} ({FIXTURE_PREFIX}*) left by an interrupted run"


def remove_fixture_keys(
    client: redis.Redis, prefix: str = FIXTURE_PREFIX, by_slot: bool = False
) -> int:
    """Delete every key under `prefix` (SCAN, then DEL in batches); return how many.

    `by_slot`: a cluster node, where one DEL may name keys of one slot only (CROSSSLOT);
    its SCAN returns only its own keys, whatever tag they carry."""
    if by_slot:
        return delete_by_slot(client, list(client.scan_iter(match=f"{prefix}*", count=BATCH)))
    removed, batch = 0, []
    for key in client.scan_iter(match=f"{prefix}*", count=BATCH):
        batch.append(key)
        if len(batch) >= BATCH:
            removed += client.delete(*batch)
            batch = []
    if batch:
        removed += client.delete(*batch)
    return removed


def delete_by_slot(client: redis.Redis, keys: Collection[str], command: str = "DEL") -> int:
    """DEL (or UNLINK) `keys` on one cluster node, one command per hash slot and batch (a
    command naming keys of two slots is refused with CROSSSLOT); return how many went."""
    by_slot: dict[int, list[str]] = {}
    for key in keys:
        by_slot.setdefault(key_slot(key.encode()), []).append(key)
    pipe = client.pipeline(transaction=False)
    for names in by_slot.values():
        for start in range(0, len(names), BATCH):
            pipe.execute_command(command, *names[start : start + BATCH])
    return sum(pipe.execute()) if by_slot else 0


@contextmanager
def fixture_keys(client: redis.Redis, env: Environment) -> Iterator[str]:
    """Yield the fixture key prefix (tagged on a cluster node: fixture_prefix); its keys are
    removed before (leftovers of a run that died) and after the block, whatever happens
    inside."""
    require_scratch(env)
    # A fallback: `recover` removes them at the start of the run, and says so in the report.
    removed = remove_fixture_keys(client, by_slot=env.cluster)
    if removed:
        log.warning("environment %r: %s", env.name, _fixture_note(removed))
    try:
        yield fixture_prefix(env)
    finally:
        remove_fixture_keys(client, by_slot=env.cluster)


def members(count: int, seed: int) -> list[str]:
    """`count` pseudo-random 12-character strings (like the seed's list members), reproducible."""
    rng = random.Random(seed)
    # base32 of random bytes: 12 characters from [a-z2-7] each, without a Python loop per char.
    alphabet = base64.b32encode(rng.randbytes(count * 8)).decode().lower()
    return [alphabet[i * 12 : i * 12 + 12] for i in range(count)]


def build_list(client: redis.Redis, key: str, length: int, seed: int = 12345) -> None:
    """RPUSH `length` members into `key`, in pipelined batches."""
    values = members(length, seed)
    pipe = client.pipeline(transaction=False)
    for start in range(0, length, BATCH):
        pipe.rpush(key, *values[start : start + BATCH])
    pipe.execute()


def build_hash(client: redis.Redis, key: str, fields: int, seed: int = 54321) -> None:
    """HSET `fields` field/value pairs into `key`, in pipelined batches."""
    values = members(fields, seed)
    pipe = client.pipeline(transaction=False)
    for start in range(0, fields, BATCH):
        chunk = {f"field:{i}": values[i] for i in range(start, min(start + BATCH, fields))}
        pipe.hset(key, mapping=chunk)
    pipe.execute()


def build_strings(client: redis.Redis, prefix: str, count: int, seed: int = 777) -> None:
    """MSET `count` string keys `<prefix><i>` with 12-byte values, in pipelined batches."""
    values = members(count, seed)
    pipe = client.pipeline(transaction=False)
    for start in range(0, count, BATCH):
        pipe.mset({f"{prefix}{i}": values[i] for i in range(start, min(start + BATCH, count))})
    pipe.execute()
