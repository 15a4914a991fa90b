"""A round holds its host group once: each identity asked and locked once, one Prefect lease for
the group; the environments' own slots inside it take nothing again, and two rounds that need
the same hosts in opposite orders never wait on each other in a circle."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from yardstick.flows import hostlock
from yardstick.flows.hostlock import HostBusy, holding, host_slot, host_slots, lock_name
from yardstick.settings.config import Environment

pytestmark = pytest.mark.server_agnostic


def on_host(name: str, host_id: str) -> Environment:
    """An environment locked by its host_id (no server is asked who it is)."""
    return Environment(name=name, url="redis://127.0.0.1:1/0", mode="read-only", host_id=host_id)


@pytest.fixture
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("YARDSTICK_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return tmp_path / "locks"


def busy_elsewhere(env: Environment) -> bool:
    """Whether another thread (its own lock file descriptors) finds `env`'s host taken."""
    found: list[bool] = []

    def probe() -> None:
        try:
            with host_slot(env, "probe", lambda _: None, wait_s=0):
                found.append(False)
        except HostBusy:
            found.append(True)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(timeout=30)
    return found[0]


def test_a_round_holds_its_group_once_and_the_slots_inside_take_nothing(locks, start_redis):
    served = start_redis()
    envs = [on_host("a", "h1"), on_host("b", "h2"), on_host("c", "h1")]
    real = Environment(name="real", url=served.url, mode="read-only")
    asked: list[str] = []
    ask = hostlock.host_identity

    def counted(env: Environment) -> str:
        if threading.current_thread() is threading.main_thread():  # not the probes' threads
            asked.append(env.name)
        return ask(env)

    hostlock.host_identity = counted
    try:
        with holding([*envs, real], "a round", lambda _: None):
            assert all(busy_elsewhere(env) for env in [*envs, real])
            for env in [*envs, real]:
                # Re-entrant: a second flock of this process on the same file would wait.
                with host_slots([env], "an environment", lambda _: None, wait_s=0) as slots:
                    assert slots[env.name].identity is not None
            assert busy_elsewhere(real)  # still held: the round, not the environment, lets go
        assert not any(busy_elsewhere(env) for env in [*envs, real])
    finally:
        hostlock.host_identity = ask
    assert asked.count("real") == 1  # asked once for the round, not again per environment


def test_a_host_busy_at_the_round_s_start_is_waited_for_by_its_environment_alone(locks):
    a, b = on_host("a", "h1"), on_host("b", "h2")
    release = threading.Event()
    taken = threading.Event()

    def other_run() -> None:
        with host_slot(b, "another run", lambda _: None):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=other_run)
    thread.start()
    taken.wait(10)
    told: list[str] = []
    with holding([a, b], "a round", told.append, wait_s=5):
        assert busy_elsewhere(a)  # the free host is held for the round
        assert not told  # the round itself never waits
        with pytest.raises(HostBusy):
            with host_slots([b], "b", told.append, wait_s=0.5):
                pass
        threading.Timer(0.5, release.set).start()
        with host_slots([b], "b", told.append, wait_s=10) as slots:
            assert slots["b"].identity == "host:h2"
    thread.join(timeout=10)
    assert told and "another run" in told[0]


def test_rounds_needing_hosts_in_opposite_orders_never_wait_in_a_circle(locks):
    """A round holding B that needs A (A sorts first) never waits for A holding B."""
    a, b = on_host("a", "h-a"), on_host("b", "h-b")
    done: list[str] = []

    def run(first: Environment, then: Environment, label: str) -> None:
        for _ in range(10):
            with holding([first], label, lambda _: None, wait_s=30):
                with host_slots([first, then], label, lambda _: None, wait_s=30) as slots:
                    assert slots[first.name].identity and slots[then.name].identity
                    time.sleep(0.01)
        done.append(label)

    threads = [
        threading.Thread(target=run, args=(b, a, "b then a")),
        threading.Thread(target=run, args=(a, b, "a then b")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert sorted(done) == ["a then b", "b then a"]


def counted(method, calls: list[str], name: str):
    """`method`, recording each call's name in `calls`."""

    def call(*args, **kwargs):
        calls.append(name)
        return method(*args, **kwargs)

    return call


def test_a_busy_host_below_the_round_s_is_waited_for_in_order_and_the_round_kept(locks):
    """The round holds B and C; A (sorting first) is busy: the round lets go, waits for A
    holding nothing above it, then holds B and C again."""
    a, b, c = on_host("a", "h-a"), on_host("b", "h-b"), on_host("c", "h-c")
    taken, release = threading.Event(), threading.Event()

    def other_run() -> None:
        with host_slot(a, "another run", lambda _: None):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=other_run)
    thread.start()
    taken.wait(10)
    with holding([b, c], "a round", lambda _: None):
        threading.Timer(0.5, release.set).start()
        with host_slots([a], "a", lambda _: None, wait_s=10) as slots:
            assert slots["a"].identity == "host:h-a"
            assert all(busy_elsewhere(env) for env in (a, b, c))
    thread.join(timeout=10)
    assert not any(busy_elsewhere(env) for env in (a, b, c))


ANOTHER_MACHINE = textwrap.dedent(
    """
    import sys
    from yardstick.flows.hostlock import HostBusy, host_slot
    from yardstick.settings.config import Environment

    env = Environment(name="x", url="redis://127.0.0.1:1/0", mode="read-only", host_id=sys.argv[1])
    try:
        with host_slot(env, "another machine", lambda _: None, wait_s=float(sys.argv[2])):
            print("taken")
    except HostBusy as exc:
        print("busy:", exc)
    """
)


def another_machine(tmp_path, host_id: str, wait_s: float, env: dict) -> str:
    """A run with its own lock folder (another machine) on the same Prefect API."""
    proc = subprocess.run(
        [sys.executable, "-c", ANOTHER_MACHINE, host_id, str(wait_s)],
        env={**env, "YARDSTICK_LOCK_DIR": str(tmp_path / "other-machine")},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_a_round_takes_one_lease_for_its_group_on_a_shared_api(
    prefect_server, tmp_path, monkeypatch
):
    import os

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    os.environ["YARDSTICK_LOCK_DIR"] = str(tmp_path / "locks")
    # The harness's API is a setting of this process: the other machine is told it.
    machine = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    try:
        envs = [on_host("a", "lease-1"), on_host("b", "lease-2"), on_host("c", "lease-3")]
        names = [lock_name(f"host:{env.host_id}") for env in envs]
        client = hostlock.api_client()  # the process's one client (no flow run here)
        calls: list[str] = []
        for method in ("increment_concurrency_slots_with_lease", "renew_concurrency_lease"):
            monkeypatch.setattr(client, method, counted(getattr(client, method), calls, method))
        monkeypatch.setattr(hostlock, "RENEW_FRACTION", 1 / 60)  # renewed every second
        with holding(envs, "a round", lambda _: None):
            for env in envs:
                with host_slots([env], "an environment", lambda _: None):
                    pass
            # First round on these hosts: a grant naming no limit, then the limits made, one lease.
            assert calls.count("increment_concurrency_slots_with_lease") == 2
            time.sleep(2.5)
            assert calls.count("renew_concurrency_lease") >= 1
            with get_client(sync_client=True) as client:
                held = [client.read_global_concurrency_limit_by_name(n) for n in names]
            assert [(limit.limit, limit.active_slots) for limit in held] == [(1, 1)] * 3
            # Another machine (its own lock files, the same API) finds the host taken.
            assert another_machine(tmp_path, "lease-2", 1.0, machine).startswith("busy:")
        with get_client(sync_client=True) as client:
            assert all(
                client.read_global_concurrency_limit_by_name(n).active_slots == 0 for n in names
            )
        assert another_machine(tmp_path, "lease-2", 1.0, machine) == "taken"
    finally:
        del os.environ["YARDSTICK_LOCK_DIR"]


def test_a_frozen_prefect_api_makes_the_hosts_busy_without_holding_the_round(locks, monkeypatch):
    """An API that accepts and never answers: the round's lease is given up after API_WAIT_S
    once, each environment is then refused at once (not API_WAIT_S each)."""
    import socket

    from prefect.settings import PREFECT_API_URL, temporary_settings

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # the kernel accepts; nobody answers
    monkeypatch.setattr(hostlock, "API_WAIT_S", 1.0)
    monkeypatch.setattr(hostlock, "_silent_until", {})
    envs = [on_host("a", "f1"), on_host("b", "f2"), on_host("c", "f3")]
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/api"
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            start = time.monotonic()
            with holding(envs, "a round", lambda _: None, wait_s=30):
                for env in envs:
                    with pytest.raises(HostBusy, match="Prefect API"):
                        with host_slots([env], "an environment", lambda _: None, wait_s=30):
                            pass
            assert time.monotonic() - start < 10  # one wait of API_WAIT_S, not one per host
        assert not any(busy_elsewhere(env) for env in envs)  # no file lock left behind
    finally:
        listener.close()
