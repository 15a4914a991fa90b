"""yardstick/locks.py between two real processes: a waiter is told who holds the lock and gets it
when let go; shared holders coexist; an exclusive one excludes them; a dead holder's record is
never believed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from yardstick import locks

pytestmark = pytest.mark.server_agnostic

HOLDER = textwrap.dedent(
    """
    import sys
    from yardstick import locks
    lock = locks.FileLock(sys.argv[1], shared=sys.argv[2] == "shared", who="run R-7",
                          doing="testing it")
    lock.acquire()
    print("held", flush=True)
    sys.stdin.readline()
    lock.release()
    print("released", flush=True)
    sys.stdin.readline()
    """
)


@pytest.fixture
def holder(tmp_path):
    """Start processes holding the lock file at tmp_path/x.lock (shared or exclusive)."""
    started: list[subprocess.Popen] = []

    def start(shared: bool = False) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(tmp_path / "x.lock"), "shared" if shared else "ex"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        assert process.stdout.readline().strip() == "held"
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def let_go(process: subprocess.Popen) -> None:
    """Ask a holder to release its lock, and wait until it has."""
    process.stdin.write("\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "released"


def test_a_waiter_is_told_who_holds_the_lock_and_gets_it_when_let_go(tmp_path, holder):
    other = holder()
    told: list[str] = []
    lock = locks.FileLock(tmp_path / "x.lock", what="the thing", on_wait=told.append, poll_s=0.05)
    assert not lock.acquire(blocking=False)
    assert not lock.acquire(timeout_s=0.3)
    assert told[0].startswith(f"waiting for run R-7 (pid {other.pid}, testing it) that holds the ")
    with pytest.raises(locks.Busy, match=rf"the thing still held by run R-7 \(pid {other.pid}"):
        with locks.FileLock(tmp_path / "x.lock", what="the thing", timeout_s=0.2, poll_s=0.05):
            pass
    let_go(other)
    with locks.FileLock(tmp_path / "x.lock", on_wait=told.append, poll_s=0.05) as mine:
        assert mine.held
    assert len(told) == 1  # said once, and nothing when the lock was free


def test_a_waiter_gets_the_lock_the_moment_its_holder_lets_go(tmp_path, holder):
    other = holder()
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from yardstick import locks\n"
            "with locks.FileLock(sys.argv[1], on_wait=lambda m: print(m, flush=True)):\n"
            "    print('got', flush=True)\n",
            str(tmp_path / "x.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        said = waiter.stdout.readline()
        assert f"run R-7 (pid {other.pid}, testing it)" in said
        time.sleep(0.3)
        assert waiter.poll() is None  # still waiting
        let_go(other)
        assert waiter.stdout.readline().strip() == "got"
        assert waiter.wait(timeout=30) == 0
    finally:
        waiter.kill()
        waiter.wait()


def test_shared_holders_coexist_and_an_exclusive_one_excludes_them(tmp_path, holder):
    first = holder(shared=True)
    second = holder(shared=True)  # taken while the first holds it: `held` was printed
    reader = locks.FileLock(tmp_path / "x.lock", shared=True)
    assert reader.acquire(blocking=False)
    reader.release()
    writer = locks.FileLock(tmp_path / "x.lock")
    assert not writer.acquire(blocking=False)
    let_go(first)
    assert not writer.acquire(blocking=False)  # the second reader still holds it
    let_go(second)
    assert writer.acquire(blocking=False)
    # An exclusive holder keeps readers out.
    assert not locks.FileLock(tmp_path / "x.lock", shared=True).acquire(blocking=False)
    writer.release()


def test_a_killed_holder_leaves_the_lock_free_and_its_record_unbelieved(tmp_path, holder):
    other = holder()
    other.kill()
    other.wait()
    lock = locks.FileLock(tmp_path / "x.lock")
    assert lock.acquire(blocking=False)  # the kernel let go with the process
    lock.release()
    # A record naming a pid that holds nothing (a dead run's) is not believed.
    quiet = holder()
    (tmp_path / "x.lock.holder").write_text(
        '{"pid": 1, "who": "dead run", "doing": "x", "since": "2026-01-01T00:00:00+00:00"}'
    )
    phrase = locks.FileLock(tmp_path / "x.lock").holder()
    assert "dead run" not in phrase
    assert phrase in (f"pid {quiet.pid}", "another process")
