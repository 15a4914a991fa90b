"""A dedicated database for load generators that cannot prefix their keys (redis-benchmark):
it must be empty before, and everything in it is removed after.

A claim key, set before the tool writes anything and removed last, marks the database as the
tool's: a run killed halfway leaves it behind, so the next run knows the keys it finds there
are its own (and removes them, saying so) instead of refusing them as someone else's.

A Redis Cluster has database 0 only, beside other keys: there each primary gets a claim
under its hash tag, and what is removed is exactly the keys named as a cluster load names
them (CLUSTER_LOAD_KEY_RE), never the node's other keys (claimed_nodes, recover_node)."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.scratch import delete_by_slot, require_scratch

UNLINK_BATCH = 500
# Starts with the tool's prefix (`yardstick:`), like every key the tool writes.
CLAIM_KEY = "yardstick:bench-claim"
# memtier --cluster-mode names its keys with this prefix (--key-prefix): the tool's own.
MEMTIER_CLUSTER_PREFIX = "yardstick:memtier:"
# What a load writes on a cluster: redis-benchmark --cluster (6.2 and 7.0 alike) gives each
# key a hash tag from its table, one of the slots of the node its client talks to
# (`key:{06S}:__rand_int__`, `mylist:{63n}`; a tag may hold a brace itself: `key:{8M}}:...`;
# 12 digits instead of __rand_int__ with -r), memtier the prefix above. Only such names are
# ever removed from a cluster node.
CLUSTER_LOAD_KEY_RE = re.compile(
    r"(?:key|counter):\{\S{1,8}\}:(?:__rand_int__|\d{12})"
    r"|(?:mylist|myset|myhash|myzset|mystream):\{\S{1,8}\}"
    rf"|{re.escape(MEMTIER_CLUSTER_PREFIX)}\d+"
)

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


# --- a cluster: database 0 of every primary, beside the node's other keys --------------------


def claim_key(env: Environment) -> str:
    """The claim key of one cluster primary: under its hash tag, so it lives on that node."""
    return f"{CLAIM_KEY}:{env.key_tag}" if env.key_tag else CLAIM_KEY


def cluster_load_keys(client: redis.Redis) -> list[str]:
    """The keys of the client's node named as a cluster load names them (SCAN: its own keys)."""
    return [k for k in client.scan_iter(count=1000) if CLUSTER_LOAD_KEY_RE.fullmatch(k)]


def remove_cluster_load(client: redis.Redis) -> int:
    """Unlink every key of the client's cluster node named like a load's; return how many."""
    return delete_by_slot(client, cluster_load_keys(client), command="UNLINK")


def _node_leftovers_note(env: Environment, removed: int, claim_text: str) -> str:
    """The sentence about what an interrupted cluster load left on one node."""
    keys = f"{removed} benchmark key" + ("" if removed == 1 else "s")
    claim = Claim.from_json(claim_text)
    by = (
        f"an interrupted {claim.role} run (claimed {claim.started_at} by pid {claim.pid} "
        f"on host {claim.host})"
        if claim is not None
        else f"an interrupted run (its claim is unreadable: {claim_text[:80]!r})"
    )
    return f"removed {keys} left on {env.address} by {by}"


def _recover_claimed_node(client: redis.Redis, env: Environment) -> str | None:
    """When an earlier run's claim is on this node, remove its load keys and the claim;
    the note saying so (None: no claim, nothing done)."""
    claim_text = client.get(claim_key(env))
    if claim_text is None:
        return None
    note = _node_leftovers_note(env, remove_cluster_load(client), claim_text)
    client.unlink(claim_key(env))
    log.warning("environment %r: %s", env.name, note)
    return note


@contextmanager
def claimed_nodes(
    nodes: Sequence[Environment], role: str, notes: list[str] | None = None
) -> Iterator[list[redis.Redis]]:
    """Yield clients on every primary of a cluster (database 0, the only one), each claimed
    for the block; afterwards remove exactly the keys named like a cluster load's, then the
    claims. Keys so named without a claim are someone else's: refused (ForeignKeys)."""
    for node in nodes:
        require_scratch(node)
    clients: list[redis.Redis] = []
    try:
        for node in nodes:
            clients.append(open_client(node, role))
            note = _recover_claimed_node(clients[-1], node)
            if note is not None and notes is not None:
                notes.append(note)
            found = cluster_load_keys(clients[-1]) if note is None else []
            if found:
                raise ForeignKeys(
                    f"environment {node.name!r}: {node.address} holds {len(found)} keys named "
                    f"like a benchmark's (e.g. {found[0][:60]!r}) the tool did not claim; "
                    "refusing to load the cluster (they would be overwritten, then removed)"
                )
        for client, node in zip(clients, nodes, strict=True):
            client.set(claim_key(node), Claim.now(role).to_json())
        try:
            yield clients
        finally:
            for client, node in zip(clients, nodes, strict=True):
                remove_cluster_load(client)
                client.unlink(claim_key(node))
    finally:
        for client in clients:
            client.close()


def recover_node(env: Environment) -> list[str]:
    """Remove what an interrupted cluster load left on this primary (when its claim is
    there): the keys named like a load's, never others; the notes saying so."""
    require_scratch(env)
    client = open_client(env, "recover")
    try:
        note = _recover_claimed_node(client, env)
        return [note] if note else []
    finally:
        client.close()
