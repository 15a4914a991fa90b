"""What a measurement changes on a scratch server, undone on the way out even when it fails
halfway: every CONFIG SET is set back, every fixture key removed. Read-only environments
are refused here before anything is sent."""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from yardstick.config import Environment

# Every key the tool writes starts with this; cleanup removes exactly these keys and never
# flushes a database (a scratch server may hold someone else's keys too).
FIXTURE_PREFIX = "yardstick:fixture:"
# Pipelined batch size when building fixtures: large enough to be quick, small enough that
# no single command stalls the server (and lands in the SLOWLOG) for long.
BATCH = 1000


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
    """CONFIG SET each change for the block; yield the previous values, set back afterwards."""
    require_scratch(env)
    original: dict[str, str] = {}
    try:
        for key, value in changes.items():
            before = client.config_get(key)
            if key not in before:
                raise ValueError(f"CONFIG GET {key}: this server has no such setting")
            # Recorded before the SET, so a SET that fails halfway is still undone.
            original[key] = str(before[key])
            client.config_set(key, value)
        yield dict(original)
    finally:
        restore_config(client, original)


def restore_config(client: redis.Redis, original: dict[str, str]) -> None:
    """Set each setting back and read it again; raise RestoreFailed naming what differs."""
    problems: list[str] = []
    for key, value in reversed(list(original.items())):
        try:
            client.config_set(key, value)
            now = str(client.config_get(key).get(key))
            if now != value:
                problems.append(f"{key} is {now!r}, was {value!r}")
        except redis.RedisError as exc:
            problems.append(f"{key} not restored to {value!r}: {exc}")
    if problems:
        raise RestoreFailed("scratch server left changed: " + "; ".join(problems))


def remove_fixture_keys(client: redis.Redis, prefix: str = FIXTURE_PREFIX) -> int:
    """Delete every key under `prefix` (SCAN, then DEL in batches); return how many."""
    removed, batch = 0, []
    for key in client.scan_iter(match=f"{prefix}*", count=BATCH):
        batch.append(key)
        if len(batch) >= BATCH:
            removed += client.delete(*batch)
            batch = []
    if batch:
        removed += client.delete(*batch)
    return removed


@contextmanager
def fixture_keys(client: redis.Redis, env: Environment) -> Iterator[str]:
    """Yield the fixture key prefix; its keys are removed before (leftovers of a run that died)
    and after the block, whatever happens inside."""
    require_scratch(env)
    remove_fixture_keys(client)
    try:
        yield FIXTURE_PREFIX
    finally:
        remove_fixture_keys(client)


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
