"""One measurement per Redis host at a time, whoever starts it.

The lock is named after the server itself, not after the host as this prober writes it (two
probers' `localhost` are two machines): the environment's configured `host_id`, else the
server process's INFO run_id. Two locks hold it:
- a file lock (flock) on this machine, in a folder every run shares whatever its Prefect home
  or API: the kernel drops it with its holder, so a killed run never leaves it held;
- when runs share a Prefect API (workers on several machines), a Prefect global concurrency
  limit of one slot, taken with a lease the holder renews: a killed holder's lease expires
  and the server's repossessor frees the slot. A run's own private Prefect server (the CLI
  without PREFECT_API_URL) keeps no limit at all: that server dies with the run, and a slot
  it held would stay taken in the SQLite file the next run opens."""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from yardstick import interrupt
from yardstick.access.connect import open_client
from yardstick.flows.landing import one_line
from yardstick.settings.config import Environment
from yardstick.tasks.base import unit_kind, utc_now
from yardstick.tasks.slowlog import server_identity

# Set by the CLI when it runs its own Prefect server: no other run can see that server.
PRIVATE_API_VARIABLE = "YARDSTICK_PRIVATE_PREFECT_API"
# A frozen or dead server must not hold the run: its identity is asked with a short timeout.
IDENTITY_TIMEOUT_S = 5.0
# Prefect renews the lease well before it runs out; a killed holder's slot is free after it.
LEASE_S = 60.0
POLL_S = 0.5


class HostBusy(Exception):
    """The host's lock was not free within the wait allowed."""


def lock_dir() -> Path:
    """The machine-wide folder of lock files (YARDSTICK_LOCK_DIR, else under /tmp)."""
    return Path(os.environ.get("YARDSTICK_LOCK_DIR") or "/tmp/redis-yardstick-locks")


def lock_name(identity: str) -> str:
    """A name safe for a file and for Prefect (no slashes, no spaces)."""
    return "yardstick-host-" + (re.sub(r"[^a-z0-9.-]+", "-", identity.lower()).strip("-") or "x")


def host_identity(env: Environment) -> str:
    """Who the lock is for: `host:<host_id>` when configured, else `server:<run_id>` (asked
    with a short timeout: a frozen server must not hold the run)."""
    if env.host_id:
        return f"host:{env.host_id}"  # every node of a host_id environment: one lock
    client = open_client(env, "lock", command_timeout_s=IDENTITY_TIMEOUT_S)
    try:
        return f"server:{server_identity(client).run_id}"
    finally:
        client.close()


@dataclass(frozen=True)
class Slot:
    """The lock held for one environment, or why none could be: its server did not answer."""

    identity: str | None
    unreachable: str | None = None


def _holder(fd: int) -> str:
    """What the holder wrote into the lock file, as one phrase."""
    try:
        facts = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return "another run"
    if not facts:
        return "another run"
    return (
        f"pid {facts.get('pid')} on {facts.get('host')} ({facts.get('what')}, since "
        f"{facts.get('since')})"
    )


@contextmanager
def file_lock(
    identity: str, what: str, wait_s: float | None, on_wait: Callable[[str], None]
) -> Iterator[None]:
    """Hold the machine-wide file lock of `identity`; wait for it (stop-aware), at most
    `wait_s` when given (HostBusy after)."""
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        folder.chmod(0o1777)  # every user's runs share it, as /tmp itself
    except PermissionError:
        pass  # made by another user, who opened it up already
    path = folder / f"{lock_name(identity)}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        writable = True
    except PermissionError:  # another user's file without write access: lock, say nothing
        fd, writable = os.open(path, os.O_RDONLY), False
    try:
        deadline = None if wait_s is None else time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    on_wait(f"{identity} is being measured by {_holder(fd)}: waiting")
                    told = True
                if deadline is not None and time.monotonic() >= deadline:
                    raise HostBusy(
                        f"{identity} still measured by {_holder(fd)} after {wait_s:.0f} s"
                    ) from None
                interrupt.sleep(POLL_S)
        if writable:
            facts = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "what": what,
                "since": utc_now().isoformat(timespec="seconds"),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(facts).encode(), 0)
        try:
            yield
        finally:
            if writable:
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def shared_prefect_api() -> bool:
    """Whether this run talks to a Prefect API other runs may share."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value()) and not os.environ.get(PRIVATE_API_VARIABLE)


def ensure_limit(name: str) -> None:
    """Create the 1-slot limit unless it exists (read first: 288 collections a day would
    otherwise each send a create that fails on the unique name, logged as a traceback)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
            return  # created by an earlier run, or by the operator with another limit
        except ObjectNotFound:
            pass
        try:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
        except ObjectAlreadyExists:
            pass  # created meanwhile by a run started at the same time


@contextmanager
def _locked(
    identity: str, what: str, on_wait: Callable[[str], None], wait_s: float | None
) -> Iterator[None]:
    """Hold the file lock of `identity`, and its Prefect slot when runs share an API."""
    with ExitStack() as stack:
        stack.enter_context(file_lock(identity, what, wait_s, on_wait))
        if shared_prefect_api():
            from prefect.concurrency.sync import concurrency

            name = lock_name(identity)
            ensure_limit(name)
            stack.enter_context(
                concurrency(
                    name, occupy=1, timeout_seconds=wait_s, lease_duration=LEASE_S, strict=False
                )
            )
        yield


@contextmanager
def host_slot(
    env: Environment, what: str, on_wait: Callable[[str], None], wait_s: float | None = None
) -> Iterator[Slot]:
    """Hold the lock of the host serving `env` for the block. A server that does not answer
    holds nothing: the slot says why, and the families are not attempted."""
    with host_slots([env], what, on_wait, wait_s) as slots:
        yield slots[env.name]


@contextmanager
def host_slots(
    units: list[Environment],
    what: str,
    on_wait: Callable[[str], None],
    wait_s: float | None = None,
) -> Iterator[dict[str, Slot]]:
    """Hold the locks of every server of an environment (flows/units.py) for the block, each
    identity once and in one order (two runs locking one cluster never wait on each other in a
    circle). A cluster as a whole holds no lock of its own: its nodes' are held. With a
    `host_id` the environment is one host: its one lock covers every node."""
    slots: dict[str, Slot] = {}
    identities: dict[str, str] = {}
    for unit in units:
        if unit_kind(unit) == "cluster" and len(units) > 1 and not unit.host_id:
            continue
        try:
            identities[unit.name] = host_identity(unit)
        except Exception as exc:  # unreachable, frozen, refused, no password: said by the step
            slots[unit.name] = Slot(None, unreachable=one_line(exc))
    with ExitStack() as stack:
        for identity in sorted(set(identities.values())):
            stack.enter_context(_locked(identity, what, on_wait, wait_s))
        for name, identity in identities.items():
            slots[name] = Slot(identity)
        for unit in units:
            slots.setdefault(unit.name, Slot(None))  # the cluster: its nodes' locks are held
        yield slots
