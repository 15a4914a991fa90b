"""Short-lived credentials for the wrapped C tools (redis-benchmark, memtier_benchmark).

Neither tool reads a password from a variable or a file, so whatever authenticates them sits
on their command line, where `ps` shows it to every user of the machine. They therefore never
get the environment's password: for the length of one family, the tool's own authenticated
redis-py connection creates an ACL user with a random name and password that may run data
commands but no administrative or dangerous ones, and deletes it afterwards. Its password is
visible while the tool runs and worthless once the user is gone. A user left behind by a
killed run is deleted at the start of the next one on that server.

No password configured: no user is needed and none is created. A server without ACL (before
6.0) or a connection not allowed to create users: the family cannot run (ToolAuthUnavailable)
-- the real password is never put on a command line instead.

Nothing here logs, records or raises with a password."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis

from yardstick.access.connect import open_client, password_for
from yardstick.access.environment import Environment
from yardstick.access.guard import ReadOnlyViolation

log = logging.getLogger(__name__)

USER_PREFIX = "yardstick-bench-"
# Data commands in every database, nothing administrative or dangerous: no CONFIG (CONFIG GET
# requirepass would hand out the real password), no ACL, FLUSHDB, KEYS, DEBUG, SHUTDOWN.
# redis-benchmark asks CONFIG GET save/appendonly first; denied, it warns and goes on.
# `resetchannels` (6.2+): no Pub/Sub channel; dropped on 6.0, which does not know it.
COMMAND_RULES = ("~*", "resetchannels", "+@all", "-@admin", "-@dangerous")
# A tool in cluster mode reads the cluster's layout first (redis-benchmark CLUSTER NODES,
# memtier CLUSTER SLOTS): on Redis 6.2 CLUSTER is an @admin command, so allowed by name.
CLUSTER_RULES = ("+cluster|nodes", "+cluster|slots")


class ToolAuthUnavailable(Exception):
    """No per-run user can be created: the family must not run (its reason says why)."""


@dataclass(frozen=True)
class ToolCredentials:
    """A per-run ACL user for a wrapped tool; both None when the server needs no password."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    # Users of earlier runs (killed before they could delete theirs) removed at the start.
    leftovers_removed: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never show the password, even in a traceback's locals
        return f"ToolCredentials(user={self.user!r}, leftovers_removed={self.leftovers_removed})"


def _reason(exc: BaseException, *secrets_: str | None) -> str:
    """One line from a server error, with any secret blanked out."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    for secret in secrets_:
        if secret:
            text = text.replace(secret, "***")
    return text


def _unavailable(reason: str) -> ToolAuthUnavailable:
    return ToolAuthUnavailable(
        f"cannot create a per-run ACL user: {reason}; refusing to put the password on a "
        f"command line"
    )


def remove_leftovers(client: redis.Redis) -> list[str]:
    """Delete every `yardstick-bench-*` user (left by a run killed before its cleanup)."""
    names = [str(n) for n in client.execute_command("ACL", "USERS")]
    leftovers = sorted(n for n in names if n.startswith(USER_PREFIX))
    if leftovers:
        client.execute_command("ACL", "DELUSER", *leftovers)
    return leftovers


def _create_user(
    client: redis.Redis, user: str, password: str, extra: tuple[str, ...] = ()
) -> None:
    """ACL SETUSER with the narrow rules (without `resetchannels` on servers before 6.2),
    then `extra`."""
    rules = list(COMMAND_RULES) + list(extra)
    try:
        client.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)
    except redis.exceptions.ResponseError as exc:
        if "resetchannels" not in str(exc).lower():
            raise
        rules.remove("resetchannels")
        client.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)


@contextmanager
def tool_credentials(
    env: Environment, role: str = "tool-auth", also_on: Sequence[Environment] = ()
) -> Iterator[ToolCredentials]:
    """Yield the user and password a wrapped tool authenticates with on `env`, for the
    duration of the block; the user is deleted when the block ends, however it ends.

    `also_on`: more servers the tool connects to with the same credentials (a cluster's
    primaries, for a tool in cluster mode): the same user is created on each, and deleted."""
    real_password = password_for(env)
    if real_password is None:
        yield ToolCredentials()
        return
    user = USER_PREFIX + secrets.token_hex(6)
    password = secrets.token_hex(24)  # hex: no ':' (memtier splits USER:PASSWORD at it)
    targets = [env] + [other for other in also_on if other.address != env.address]
    clients: list[redis.Redis] = []
    created: list[redis.Redis] = []  # the servers the user exists on
    leftovers: list[str] = []
    try:
        try:
            for target in targets:
                clients.append(open_client(target, role))
                leftovers += remove_leftovers(clients[-1])
                _create_user(clients[-1], user, password, CLUSTER_RULES if also_on else ())
                created.append(clients[-1])
        except (redis.exceptions.ResponseError, ReadOnlyViolation) as exc:
            # unknown command 'ACL' (before 6.0), NOPERM (a user without ACL rights), ...
            _delete_user(created, user)
            raise _unavailable(_reason(exc, password, real_password)) from None
        if leftovers:
            log.warning(
                "environment %r: %s",
                env.name,
                leftovers_note(ToolCredentials(leftovers_removed=tuple(sorted(set(leftovers))))),
            )
        try:
            yield ToolCredentials(user, password, tuple(sorted(set(leftovers))))
        finally:
            _delete_user(created, user)
    finally:
        for client in clients:
            client.close()


def _delete_user(clients: list[redis.Redis], user: str) -> None:
    """ACL DELUSER on each server; one that fails is left for its next run (remove_leftovers)."""
    for client in clients:
        try:
            client.execute_command("ACL", "DELUSER", user)
        except redis.exceptions.RedisError:
            pass


def leftovers_note(credentials: ToolCredentials) -> str | None:
    """A sentence for the step, when users of a killed run were deleted."""
    if not credentials.leftovers_removed:
        return None
    return (
        f"deleted {len(credentials.leftovers_removed)} per-run ACL user(s) left by a killed run "
        f"({', '.join(credentials.leftovers_removed)})"
    )
