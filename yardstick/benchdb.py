"""A dedicated database for load generators that cannot prefix their keys (redis-benchmark):
it must be empty before, and everything in it is removed after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from yardstick.config import Environment
from yardstick.connect import open_client
from yardstick.scratch import require_scratch

UNLINK_BATCH = 500


class ForeignKeys(Exception):
    """The benchmark database holds keys the tool did not write."""


def remove_all(client: redis.Redis) -> int:
    """Unlink every key of the client's (previously empty) database; return how many."""
    keys = list(client.scan_iter(count=1000))
    removed = 0
    for start in range(0, len(keys), UNLINK_BATCH):
        removed += client.unlink(*keys[start : start + UNLINK_BATCH])
    return removed


@contextmanager
def empty_database(env: Environment, db: int, role: str) -> Iterator[redis.Redis]:
    """Yield a client on database `db` after checking it is empty; empty it again after."""
    require_scratch(env)
    client = open_client(env, role, db=db)
    try:
        keys = client.dbsize()
        if keys:
            raise ForeignKeys(
                f"environment {env.name!r}: database {db} holds {keys} keys the tool did not "
                f"write; refusing to load it (choose an empty database in the profile)"
            )
        try:
            yield client
        finally:
            remove_all(client)
    finally:
        client.close()
