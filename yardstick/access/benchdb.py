"""A dedicated database for load generators that cannot prefix their keys (redis-benchmark):
it must be empty before, and everything in it is removed after.

A claim key, set before the tool writes anything and removed last, marks the database as the
tool's: a run killed halfway leaves it behind, so the next run knows the keys it finds there
are its own (and removes them, saying so) instead of refusing them as someone else's."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.scratch import require_scratch

UNLINK_BATCH = 500
# Starts with the tool's prefix (`yardstick:`), like every key the tool writes.
CLAIM_KEY = "yardstick:bench-claim"

log = logging.getLogger(__name__)


class ForeignKeys(Exception):
    """The benchmark database holds keys the tool did not write."""


@dataclass(frozen=True)
class Claim:
    """Who is loading the benchmark database: stored as JSON in CLAIM_KEY."""

    role: str
    pid: int
    host: str
    started_at: str  # UTC, ISO 8601 with a Z

    @classmethod
    def now(cls, role: str) -> Claim:
        """This process's claim, as of now."""
        started_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        return cls(role=role, pid=os.getpid(), host=socket.gethostname(), started_at=started_at)

    def to_json(self) -> str:
        """The value stored in CLAIM_KEY."""
        return json.dumps(
            {"role": self.role, "pid": self.pid, "host": self.host, "started_at": self.started_at}
        )

    @classmethod
    def from_json(cls, text: str) -> Claim | None:
        """The claim stored by an earlier run; None when unreadable."""
        try:
            data = json.loads(text)
            return cls(
                role=str(data["role"]),
                pid=int(data["pid"]),
                host=str(data["host"]),
                started_at=str(data["started_at"]),
            )
        except (ValueError, TypeError, KeyError):
            return None


def remove_all(client: redis.Redis) -> int:
    """Unlink every key of the client's database but the claim; return how many."""
    keys = [key for key in client.scan_iter(count=1000) if key != CLAIM_KEY]
    removed = 0
    for start in range(0, len(keys), UNLINK_BATCH):
        removed += client.unlink(*keys[start : start + UNLINK_BATCH])
    return removed


def _leftovers_note(removed: int, db: int, claim_text: str) -> str:
    """The sentence for the report about what an interrupted run left in database `db`."""
    keys = f"{removed} key" + ("" if removed == 1 else "s")
    claim = Claim.from_json(claim_text)
    if claim is None:
        return (
            f"removed {keys} left in database {db} by an interrupted run "
            f"(its claim is unreadable: {claim_text[:80]!r})"
        )
    return (
        f"removed {keys} left in database {db} by an interrupted {claim.role} run "
        f"(claimed {claim.started_at} by pid {claim.pid} on host {claim.host})"
    )


def _remove_claimed(client: redis.Redis, env: Environment, db: int) -> str | None:
    """When an earlier run's claim is in the database, remove every key in it (all that run's)
    but the claim itself, and return the note; None when there is no claim."""
    claim_text = client.get(CLAIM_KEY)
    if claim_text is None:
        return None
    note = _leftovers_note(remove_all(client), db, claim_text)
    log.warning("environment %r: %s", env.name, note)
    return note


@contextmanager
def empty_database(
    env: Environment, db: int, role: str, notes: list[str] | None = None
) -> Iterator[redis.Redis]:
    """Yield a client on database `db` after checking it is empty; empty it again after.

    Keys left by an interrupted run (its claim is there) are removed first, and the sentence
    saying so is appended to `notes`; any other key is refused (ForeignKeys)."""
    require_scratch(env)
    client = open_client(env, role, db=db)
    try:
        keys = client.dbsize()
        if keys:
            note = _remove_claimed(client, env, db)
            if note is None:
                raise ForeignKeys(
                    f"environment {env.name!r}: database {db} holds {keys} keys the tool did "
                    f"not write; refusing to load it (choose an empty database in the profile)"
                )
            if notes is not None:
                notes.append(note)
        # Recorded before the tool writes anything, removed after everything else: whenever
        # the run dies, its keys are marked as the tool's.
        client.set(CLAIM_KEY, Claim.now(role).to_json())
        try:
            yield client
        finally:
            remove_all(client)
            client.unlink(CLAIM_KEY)
    finally:
        client.close()


def recover(env: Environment, db: int) -> list[str]:
    """Remove what an interrupted run left in benchmark database `db` (when its claim is
    there); return the notes saying so (none when nothing was left). Keys without a claim
    are left alone: the family that loads the database refuses them itself."""
    require_scratch(env)
    client = open_client(env, "recover", db=db)
    try:
        note = _remove_claimed(client, env, db)
        if note is None:
            return []
        client.unlink(CLAIM_KEY)
        return [note]
    finally:
        client.close()
