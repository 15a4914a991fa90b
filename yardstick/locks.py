"""File locks across threads and processes: shared or exclusive, waited for (stop-aware, with a
bound when given) or only tried, and naming their holder to whoever waits.

Every lock of the tool is one of these (the host, warehouse, dbt-state, lake and Prefect-start
locks). The lock is a `flock` on a file, so the kernel drops it with its holder: a run killed
with -9 never leaves a lock held. Who holds it is a record beside the file (`<lock>.holder`:
pid, who, what it does, since), written after the lock is taken and only read by a waiter; a
record left by a dead holder is never believed, since the pids holding the file are checked
in /proc/locks first."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from yardstick import interrupt

POLL_S = 0.2


class Busy(Exception):
    """The lock was not free within the wait allowed."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def machine_dir() -> Path:
    """The machine-wide folder of lock files every user's runs share (YARDSTICK_LOCK_DIR, else
    /tmp/redis-yardstick-locks), made world-writable with the sticky bit as /tmp itself."""
    folder = Path(os.environ.get("YARDSTICK_LOCK_DIR") or "/tmp/redis-yardstick-locks")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        folder.chmod(0o1777)
    except PermissionError:
        pass  # made by another user, who opened it up already
    return folder


def now() -> str:
    """The time a holder took its lock: UTC, ISO 8601 to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def process_name() -> str:
    """What this process is, for a waiter: its command, shortened."""
    try:
        argv = Path("/proc/self/cmdline").read_bytes().split(b"\0")
        words = [Path(a.decode(errors="replace")).name for a in argv[:3] if a]
        return " ".join(words)[:80] or "a process"
    except OSError:
        return "a process"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: the record a holder leaves beside the lock file."""

    pid: int
    who: str
    doing: str
    since: str  # UTC, ISO 8601 to the second
    host: str | None = None  # another machine's (an S3 lake's lease): a pid alone is ambiguous

    def phrase(self) -> str:
        """'run R-1 (pid 12, reading it)'; 'yardstick run (pid 12 on b2, compacting it)'."""
        on = f" on {self.host}" if self.host else ""
        return f"{self.who} (pid {self.pid}{on}, {self.doing})"


class FileLock:
    """One lock file, taken shared or exclusive; a context manager that waits (at most
    `timeout_s` when given, then Busy) and says once, through `on_wait`, whom for."""

    def __init__(
        self,
        path: str | Path,
        *,
        shared: bool = False,
        what: str | None = None,
        who: str | None = None,
        doing: str | None = None,
        why: str | None = None,
        timeout_s: float | None = None,
        on_wait: Callable[[str], None] | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.path = Path(path)
        self.shared = shared
        self.what = what or str(self.path)  # what the waiter is told is held
        self.who = who
        self.doing = doing or ("reading it" if shared else "holding it")
        self.why = why  # why it is held, for the waiter: "(one start at a time)"
        self.timeout_s = timeout_s
        self.on_wait = on_wait
        self.poll_s = poll_s
        self._fd: int | None = None
        self._writable = False

    @property
    def holder_path(self) -> Path:
        """The record of who holds the lock."""
        return self.path.with_name(self.path.name + ".holder")

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self, blocking: bool = True, timeout_s: float | None = None) -> bool:
        """Take the lock; False when not blocking (or past `timeout_s`) and another holds it.
        Waiting is stop-aware (interrupt.sleep raises at a stop). OSError when the lock file
        cannot be opened or made."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: already held by this lock")
        fd = self._open()
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        told = False
        try:
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not blocking or (deadline is not None and time.monotonic() >= deadline):
                        os.close(fd)
                        return False
                    if not told and self.on_wait is not None:
                        self.on_wait(self.waiting_message())
                    told = True
                    interrupt.sleep(self.poll_s)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._record()
        return True

    def release(self) -> None:
        """Let the lock go (the kernel does it if the process dies first)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if not self.shared:  # a shared record may be another reader's: left, never believed
                mine = self._read_record()
                if mine is not None and mine.pid == os.getpid():
                    self.holder_path.unlink(missing_ok=True)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> FileLock:
        if not self.acquire(timeout_s=self.timeout_s):
            holder = self.holder()
            raise Busy(f"{self.what} still held by {holder} after {self.timeout_s:.0f} s", holder)
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # --- who holds it -----------------------------------------------------------------------

    def waiting_message(self) -> str:
        """'waiting for run R-1 (pid 12, reading it) that holds the warehouse … since 08:51:02
        UTC (why)'."""
        record = self._believed_record()
        text = f"waiting for {self.holder(record)} that holds {self.what}"
        if record is not None:
            text += f" since {record.since[11:19]} UTC"
        return text + (f" ({self.why})" if self.why else "")

    def holder(self, record: Holder | None = None) -> str:
        """Who holds the lock, as one phrase ('another process' when nothing says)."""
        record = record or self._believed_record()
        if record is not None:
            return record.phrase()
        pids = self._kernel_holders()
        return f"pid {pids[0]}" if pids else "another process"

    def _believed_record(self) -> Holder | None:
        """The holder record, when its pid is among those the kernel says hold the file."""
        record = self._read_record()
        if record is None:
            return None
        pids = self._kernel_holders()
        return record if pids is None or record.pid in pids else None

    def _read_record(self) -> Holder | None:
        try:
            facts = json.loads(self.holder_path.read_text())
            return Holder(int(facts["pid"]), facts["who"], facts["doing"], facts["since"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _kernel_holders(self) -> list[int] | None:
        """The pids holding a flock on the file, from /proc/locks (None: not readable)."""
        try:
            inode = os.stat(self.path).st_ino
            lines = Path("/proc/locks").read_text().splitlines()
        except OSError:
            return None
        pids = []
        for line in lines:
            parts = line.split()
            if parts[1:2] == ["->"]:  # a waiter, not a holder
                continue
            if len(parts) > 5 and parts[1] == "FLOCK" and parts[5].endswith(f":{inode}"):
                pids.append(int(parts[4]))
        return pids

    # --- the files --------------------------------------------------------------------------

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            self._writable = True
        except PermissionError:  # another user's file, read-only to us: lock, record nothing
            fd, self._writable = os.open(self.path, os.O_RDONLY), False
        return fd

    def _record(self) -> None:
        """Say who holds the lock now (read by whoever waits for it)."""
        if not self._writable:
            return
        facts = {
            "pid": os.getpid(),
            "who": self.who or process_name(),
            "doing": self.doing,
            "since": now(),
        }
        tmp = self.holder_path.with_name(
            f".{self.holder_path.name}.{os.getpid()}.{threading.get_ident()}"
        )
        try:
            tmp.write_text(json.dumps(facts))
            os.replace(tmp, self.holder_path)
        except OSError:  # no room, or another user's record: the lock stands without it
            tmp.unlink(missing_ok=True)
