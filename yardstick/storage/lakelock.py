"""The lake's lock: taken exclusive (only tried) by a compaction, retention or migration pass,
shared (waited for) by a warehouse update reading the lake.

Appends need no lock (Delta's commits). The lock keeps a compaction's vacuum (and retention's)
from deleting files a warehouse update on this machine is reading, and two optimizes (or an
optimize and a delete) apart: delta-rs would commit both (lakefs.lease). It is a file lock
(yardstick/locks.py), so a compaction killed with -9 never blocks the next one. An S3 lake's
lock is a file on this machine named after the lake's URL, plus the lake-wide lease object for
the other machines (expiring after an hour)."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from yardstick import locks
from yardstick.storage import lakefs
from yardstick.storage.lakefs import Lake

log = logging.getLogger(__name__)

# Why a compaction or retention pass did nothing: the lock is held by another run's
# compaction, its retention pass, or its warehouse update reading the lake (shared).
LAKE_BUSY = "another run holds the lake's lock (compacting it, or updating a warehouse from it)"


def lock_file(lake: Lake) -> Path:
    """The lake's lock file: inside a local lake; for an S3 lake a machine-wide file named
    after the lake's URL (yardstick/locks.machine_dir), so it keeps apart passes on this
    machine only."""
    if lake.remote:
        digest = hashlib.sha256(lake.uri.encode()).hexdigest()[:16]
        return locks.machine_dir() / f"lake-{digest}.lock"
    lake.folder.mkdir(parents=True, exist_ok=True)
    return lake.folder / ".compaction.lock"


@contextmanager
def lake_lock(lake: Lake, doing: str = "compacting it") -> Iterator[bool]:
    """Hold the lake's lock exclusive if free (yield True), else yield False, having logged
    who holds it (a run on this machine, or another machine's lease of an S3 lake)."""
    lock = locks.FileLock(lock_file(lake), what=f"the lake {lake}", doing=doing)
    if not lock.acquire(blocking=False):
        log.info("lake %s: held by %s; this pass skipped", lake, lock.holder())
        yield False
        return
    try:
        if not lake.remote:
            yield True
            return
        owner = locks.Holder(
            os.getpid(), locks.process_name(), doing, locks.now(), socket.gethostname()
        ).phrase()
        with lakefs.lease(lake, owner) as leased:
            if not leased:
                log.info("lake %s: held by %s; this pass skipped", lake, lakefs.lease_owner(lake))
            yield leased
    finally:
        lock.release()


@contextmanager
def lake_read(lake: Lake) -> Iterator[None]:
    """Hold the lake's lock shared while a warehouse update reads the lake: another run's
    compaction or retention pass (they take it exclusive, or skip) deletes files the load may
    be reading. Updates of several warehouses share it; a pass under way is waited for."""
    lock = locks.FileLock(
        lock_file(lake),
        shared=True,
        what=f"the lake {lake}",
        doing="updating a warehouse from it",
        on_wait=log.warning,
    )
    try:
        lock.acquire()
    except OSError as exc:
        # A lake with no room for its lock file (full, or read-only to this user): nobody can
        # be compacting it through this lock either; the update reads it unlocked.
        log.warning(
            "lake %s: its lock file cannot be opened (%s); reading it unlocked",
            lake,
            exc.strerror or exc,
        )
        yield
        return
    try:
        yield
    finally:
        lock.release()
