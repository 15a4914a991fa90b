"""One measurement per Redis host at a time, whoever starts it.

The lock is named after the server itself, not after the host as this prober writes it (two
probers' `localhost` are two machines): the environment's configured `host_id`, else the
server process's INFO run_id. Two locks hold it:
- a file lock on this machine (yardstick/locks.py), in a folder every run shares whatever its
  Prefect home or API: the kernel drops it with its holder, so a killed run never leaves it held;
- when runs share a Prefect API (workers on several machines), a Prefect global concurrency
  limit of one slot, taken with a lease the holder renews: a killed holder's lease expires
  and the server's repossessor frees the slot. A run's own private Prefect server (the CLI
  without PREFECT_API_URL) keeps no limit at all: that server dies with the run, and a slot
  it held would stay taken in the SQLite file the next run opens.

A round holds a host group once (`holding`): each identity's file lock, and one lease for all
the group's limits (Prefect takes a lease's slots all or none), through one API client; the
environments' `host_slots` inside it find their identities held and take only what is new
(a cluster's nodes, a replica). The order is global: identities are taken in sorted order,
a Prefect lease only once its identities' file locks are held and never waited for while
holding them (refused: they are let go, then taken again), and an identity that sorts below
one already held is never waited for while holding it (everything is let go and taken again
in order). So no two runs, of this version or the one before, wait on each other in a circle."""

from __future__ import annotations

import contextvars
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from yardstick import interrupt, locks
from yardstick.access.connect import open_client
from yardstick.flows.landing import one_line
from yardstick.settings.config import Environment
from yardstick.tasks.base import unit_kind
from yardstick.tasks.slowlog import server_identity

log = logging.getLogger(__name__)

# Set by the CLI when it runs its own Prefect server: no other run can see that server.
PRIVATE_API_VARIABLE = "YARDSTICK_PRIVATE_PREFECT_API"
# A frozen or dead server must not hold the run: its identity is asked with a short timeout.
IDENTITY_TIMEOUT_S = 5.0
# A held round asks a server who it is again after this long (a nightly holds its group for
# hours; a restarted server is another identity): a collection round asks each server once.
IDENTITY_FRESH_S = 60.0
# The lease is renewed every LEASE_S * RENEW_FRACTION; a killed holder's slot is free after it
# (Prefect's server takes at least 60 s).
LEASE_S = 60.0
RENEW_FRACTION = 0.5
POLL_S = 0.5
# One request to the Prefect API (Prefect's own client waits 60 s, and retries), and how long
# a lease's acquisition or release is waited for, retries included: a frozen API server makes
# the hosts busy (not measured), it does not hold the round.
REQUEST_TIMEOUT_S = 10.0
API_WAIT_S = 20.0
# After an API that did not answer, further leases fail at once for this long (the rest of a
# round's hosts are not waited for one by one).
SILENT_S = 60.0
# A refused lease is asked again after the server's Retry-After, within these bounds.
RETRY_MIN_S, RETRY_MAX_S = 0.5, 5.0


class HostBusy(Exception):
    """The host's lock was not free within the wait allowed."""


class ApiSilent(HostBusy):
    """The shared Prefect API did not answer: no host can be held across machines."""


def lock_dir() -> Path:
    """The machine-wide folder of lock files (YARDSTICK_LOCK_DIR, else under /tmp)."""
    return locks.machine_dir()


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


@contextmanager
def file_lock(
    identity: str, what: str, wait_s: float | None, on_wait: Callable[[str], None]
) -> Iterator[None]:
    """Hold the machine-wide file lock of `identity`; wait for it (stop-aware), at most
    `wait_s` when given (HostBusy after)."""
    lock = locks.FileLock(
        lock_dir() / f"{lock_name(identity)}.lock",
        what=identity,
        who=what,
        doing="measuring it",
        on_wait=on_wait,
        poll_s=POLL_S,
    )
    if not lock.acquire(timeout_s=wait_s):
        raise HostBusy(f"{identity} still measured by {lock.holder()} after {wait_s:.0f} s")
    try:
        yield
    finally:
        lock.release()


def shared_prefect_api() -> bool:
    """Whether this run talks to a Prefect API other runs may share."""
    if os.environ.get(PRIVATE_API_VARIABLE):
        return False
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


# --- the Prefect API: one client, one lease per take ---------------------------------------

_clients: dict[str, object] = {}
_silent_until: dict[str, float] = {}
_clients_lock = threading.Lock()


def api_client():
    """The Prefect API client this process's slots go through: one per API URL for the
    process's life (not a client, an SSL context and a connection per environment), with a
    short request timeout of its own (a frozen API server holds a round at most about a
    minute, with the client's retries)."""
    import httpx
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = get_client(
                httpx_settings={"timeout": httpx.Timeout(REQUEST_TIMEOUT_S)}, sync_client=True
            )
            client.__enter__()
            _clients[url] = client
        return client


def ensure_limits(client, names: list[str]) -> None:
    """Create the 1-slot limits not there yet (a limit the operator made is kept as is)."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists

    for name in names:
        try:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
        except ObjectAlreadyExists:
            pass  # created meanwhile by a run started at the same time


def _holder_info():
    """The flow run holding the lease (shown with the limit's holders), when there is one."""
    try:
        from prefect.client.schemas.objects import ConcurrencyLeaseHolder
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        if ctx is not None and ctx.flow_run is not None:
            return ConcurrencyLeaseHolder(type="flow_run", id=ctx.flow_run.id)
    except Exception:  # an older Prefect: the lease is held all the same
        pass
    return None


class Lease:
    """Prefect slots of several limits under one lease, renewed by one thread until released."""

    def __init__(self, client, lease_id) -> None:
        self.client, self.lease_id = client, lease_id
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._renew, name=f"yardstick-lease-{lease_id}", daemon=True
        )
        self.thread.start()

    def _renew(self) -> None:
        """Renew until released; a failed renewal is said once and tried again next time."""
        warned = False
        while not self.stop.wait(LEASE_S * RENEW_FRACTION):
            try:
                self.client.renew_concurrency_lease(self.lease_id, lease_duration=LEASE_S)
                warned = False
            except Exception as exc:
                if not warned:
                    log.warning("host lock lease %s not renewed: %s", self.lease_id, one_line(exc))
                    warned = True

    def release(self) -> None:
        """Give the slots back (an API that does not answer in time: the lease expires)."""
        self.stop.set()
        try:
            _bounded(lambda: self.client.release_concurrency_slots_with_lease(self.lease_id))
        except Exception as exc:
            log.warning(
                "host lock lease %s not released (it expires): %s", self.lease_id, one_line(exc)
            )


class _Late(Exception):
    """A Prefect API call did not end within API_WAIT_S."""


def _bounded(call: Callable[[], object], on_late: Callable[[object], None] | None = None):
    """`call()` in a thread of its own, waited for at most API_WAIT_S (then _Late; a result
    that comes after is handed to `on_late`): a frozen API server never holds the round."""
    done = threading.Event()
    outcome: dict[str, object] = {}
    late = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc
        done.set()
        if late.is_set() and "value" in outcome and on_late is not None:
            on_late(outcome["value"])

    threading.Thread(target=run, name="yardstick-prefect-call", daemon=True).start()
    if not done.wait(API_WAIT_S):
        late.set()
        if done.is_set() and "value" in outcome and on_late is not None:
            on_late(outcome["value"])  # ended between the wait and the flag
        raise _Late(f"the Prefect API did not answer within {API_WAIT_S:.0f} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def try_lease(names: list[str]) -> tuple[Lease | None, float]:
    """One lease on every limit of `names`, or (None, seconds to wait) when one is taken;
    missing limits are created first (the server skips a name it does not know). An API that
    does not answer within API_WAIT_S is HostBusy: no lease, no measurement."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if time.monotonic() < _silent_until.get(url, 0.0):
        # Asked again just after it did not answer: say so at once, not API_WAIT_S per host.
        raise ApiSilent(f"{', '.join(names)}: the Prefect API did not answer just before")
    client = api_client()

    def give_back(granted) -> None:
        """A lease granted after the caller gave up: released at once."""
        if isinstance(granted, Lease):
            granted.release()

    try:
        return _bounded(lambda: _acquire(client, names), on_late=lambda r: give_back(r[0]))
    except _Late as exc:
        _silent_until[url] = time.monotonic() + SILENT_S
        raise ApiSilent(f"{', '.join(names)}: {exc}") from None


def _acquire(client, names: list[str]) -> tuple[Lease | None, float]:
    """try_lease's requests (the limits made on a host's first round)."""
    import httpx
    from prefect.client.schemas.responses import ConcurrencyLimitWithLeaseResponse

    for _ in range(2):
        try:
            response = client.increment_concurrency_slots_with_lease(
                names=names,
                slots=1,
                mode="concurrency",
                lease_duration=LEASE_S,
                holder=_holder_info(),
            )
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code != 423:
                raise
            try:
                retry_s = float(exc.response.headers.get("Retry-After", RETRY_MIN_S))
            except ValueError:
                retry_s = RETRY_MIN_S
            return None, min(max(retry_s, RETRY_MIN_S), RETRY_MAX_S)
        granted = ConcurrencyLimitWithLeaseResponse.model_validate(response.json())
        missing = sorted(set(names) - {limit.name for limit in granted.limits})
        if not missing:
            return Lease(client, granted.lease_id), 0.0
        # The first round on a host: its limits do not exist yet. Give back what was granted
        # and ask again for all of them together.
        client.release_concurrency_slots_with_lease(granted.lease_id)
        ensure_limits(client, missing)
    raise RuntimeError(f"Prefect limits {', '.join(names)} could not be created")


# --- what a thread holds ------------------------------------------------------------------


@dataclass
class _Hold:
    """The identities a round holds (file locks and one lease per take), and the identities
    of its environments, asked once (IDENTITY_FRESH_S)."""

    what: str
    on_wait: Callable[[str], None]
    wait_s: float | None
    identities: set[str] = field(default_factory=set)
    stack: ExitStack = field(default_factory=ExitStack)
    known: dict[tuple, tuple[float, str | None, str | None]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def identity_of(self, env: Environment) -> tuple[str | None, str | None]:
        """(identity, None) or (None, why not): asked of the server at most once a while."""
        key = (env.url, env.host_id, env.mode, env.password_env)
        found = self.known.get(key)
        if found is not None and time.monotonic() - found[0] < IDENTITY_FRESH_S:
            return found[1], found[2]
        identity, problem = _ask_identity(env)
        self.known[key] = (time.monotonic(), identity, problem)
        return identity, problem

    def take(
        self,
        needed: set[str],
        what: str,
        on_wait: Callable[[str], None],
        wait_s: float | None,
    ) -> None:
        """Hold `needed` too. What is new is waited for only when it sorts above everything
        held; below, it is only tried (no wait, no order to keep), and when busy everything
        is let go, `needed` is taken in order (waited for), and the rest only tried again."""
        with self.lock:
            new = needed - self.identities
            if not new:
                return
            if self.identities and min(new) < max(self.identities):
                try:
                    self.stack.enter_context(_taken(sorted(new), what, _quiet, 0.0))
                    self.identities |= new
                    return
                except HostBusy:
                    others = self.identities - needed
                    self.release()
                    self.stack.enter_context(_taken(sorted(needed), what, on_wait, wait_s))
                    self.identities = set(needed)
                    self.try_each(others, what)
                    return
            self.stack.enter_context(_taken(sorted(new), what, on_wait, wait_s))
            self.identities |= new

    def try_each(self, identities: set[str], what: str) -> None:
        """Hold those of `identities` that are free now (each only tried: no order to keep);
        the busy ones are left to their environments' own `host_slots`."""
        for identity in sorted(identities):
            try:
                self.stack.enter_context(_taken([identity], what, _quiet, 0.0))
            except ApiSilent:
                return
            except HostBusy:
                continue
            self.identities.add(identity)

    def release(self) -> None:
        """Let go of everything held."""
        with self.lock:
            self.identities = set()
            self.stack.close()
            self.stack = ExitStack()


def _quiet(_message: str) -> None:
    """Nothing to say: a lock only tried is not waited for."""


_HELD: contextvars.ContextVar[_Hold | None] = contextvars.ContextVar(
    "yardstick_hostlock_held", default=None
)


def _ask_identity(env: Environment) -> tuple[str | None, str | None]:
    """(identity, None), or (None, why the server did not say)."""
    try:
        return host_identity(env), None
    except Exception as exc:  # unreachable, frozen, refused, no password: said by the step
        return None, one_line(exc)


@contextmanager
def _taken(
    identities: list[str], what: str, on_wait: Callable[[str], None], wait_s: float | None
) -> Iterator[None]:
    """Hold `identities` (sorted): their file locks in order, then one Prefect lease for all
    of them when runs share an API. A refused lease is waited for holding none of the file
    locks (let go, then taken again): nothing is held while waiting on another machine."""
    deadline = None if wait_s is None else time.monotonic() + wait_s
    told = False
    shared = shared_prefect_api()
    while True:
        stack = ExitStack()
        try:
            for identity in identities:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                stack.enter_context(file_lock(identity, what, left, on_wait))
            if not shared:
                break
            lease, retry_s = try_lease([lock_name(i) for i in identities])
            if lease is not None:
                stack.callback(lease.release)
                break
        except BaseException:
            stack.close()
            raise
        stack.close()
        if not told:
            on_wait(
                f"{', '.join(identities)} held in Prefect by another run (on another machine, "
                f"or one killed less than {LEASE_S:.0f} s ago): waiting"
            )
            told = True
        if deadline is not None and time.monotonic() + retry_s > deadline:
            raise HostBusy(f"{', '.join(identities)} still held elsewhere after {wait_s:.0f} s")
        interrupt.sleep(retry_s)
    with stack:
        yield


def _identities(units: list[Environment], hold: _Hold) -> tuple[dict[str, str], dict[str, str]]:
    """The identity of each unit that has one of its own, and why the others' are unknown.
    A cluster as a whole holds no lock of its own (its nodes' are held); with a `host_id`
    the environment is one host: its one lock covers every node."""
    identities: dict[str, str] = {}
    problems: dict[str, str] = {}
    for unit in units:
        if unit_kind(unit) == "cluster" and len(units) > 1 and not unit.host_id:
            continue
        identity, problem = hold.identity_of(unit)
        if identity is not None:
            identities[unit.name] = identity
        else:
            problems[unit.name] = problem or "no identity"
    return identities, problems


@contextmanager
def holding(
    envs: list[Environment],
    what: str,
    on_wait: Callable[[str], None],
    wait_s: float | None = None,
) -> Iterator[None]:
    """Hold the hosts of a host group (environments measured one after another) for the
    block: each identity asked once and locked once, one lease for all; the `host_slots` of
    the environments inside find them held. A server that does not answer is not held (its
    environment's step says why); a Sentinel's master is known only once asked, inside."""
    hold = _Hold(what, on_wait, wait_s)
    # A Sentinel environment's URL is a placeholder until its master is asked (flows/units.py).
    identities, _ = _identities([env for env in envs if env.sentinel is None], hold)
    token = _HELD.set(hold)
    try:
        wanted = sorted(set(identities.values()))
        try:
            hold.take(set(wanted), what, _quiet, 0.0)  # tried, not waited for: see below
        except ApiSilent:
            pass  # no host can be held: each environment says so in its step
        except HostBusy:
            # Another run measures one of them: hold the others; that environment's own
            # `host_slots` waits for it (bounded) when its turn comes, as without a round.
            hold.try_each(set(wanted), what)
        yield
    finally:
        _HELD.reset(token)
        hold.release()


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
    circle). Inside `holding`, what the round holds already is not taken again, and what is
    taken here is held until the round ends."""
    outer = _HELD.get()
    hold = outer or _Hold(what, on_wait, wait_s)
    identities, problems = _identities(units, hold)
    slots = {name: Slot(None, unreachable=problem) for name, problem in problems.items()}
    try:
        hold.take(set(identities.values()), what, on_wait, wait_s)
        for name, identity in identities.items():
            slots[name] = Slot(identity)
        for unit in units:
            slots.setdefault(unit.name, Slot(None))  # the cluster: its nodes' locks are held
        yield slots
    finally:
        if outer is None:
            hold.release()
