"""delta-rs's Rust panics kept off the user's terminal: the error they accompany is raised
again as one line (lakefs.storage_errors), so their text is noise there.

A failed write (a full disk above all) makes object_store's BufWriter panic in a tokio
thread ("Already shut down", apache/arrow-rs-object-store#810); Rust's panic hook prints
that and a backtrace note to file descriptor 2, below Python. While a call into delta-rs
runs, descriptor 2 is a pipe: a thread forwards every line to the real stderr except a
panic's, and the last caller out puts stderr back and waits for the thread to drain."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# "thread 'tokio-rt-worker' (13443) panicked at …/buffered.rs:369:41:" opens a panic; its
# message, "stack backtrace:" and frames follow; a "note: …" line closes it.
_PANIC = re.compile(rb"^thread '[^']*'( \(\d+\))? panicked at ")
_NOTE = re.compile(rb"^note: ")

_lock = threading.Lock()
_users = 0
_saved_fd: int | None = None
_write_fd: int | None = None
_forwarder: threading.Thread | None = None
# The panics kept off stderr, newest last (a few kept, for a debugger's eyes).
swallowed: list[str] = []


def _forward(read_fd: int, out_fd: int) -> None:
    """Copy lines from the pipe to the real stderr, leaving out panic blocks."""
    in_panic = False
    blank = b""
    pending = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if _PANIC.match(line):
                    in_panic, blank = True, b""  # a blank line just before belongs to it
                    swallowed[:] = [*swallowed[-4:], line.decode(errors="replace")]
                elif in_panic:
                    in_panic = not _NOTE.match(line)
                elif not line.strip():
                    _write_all(out_fd, blank)
                    blank = line + b"\n"
                else:
                    _write_all(out_fd, blank + line + b"\n")
                    blank = b""
            if pending and not in_panic and not _could_open_a_panic(pending):
                # A line still being written (a progress line's redraw): passed on now.
                _write_all(out_fd, blank + pending)
                blank = pending = b""
        if not in_panic:
            _write_all(out_fd, blank + pending)


def _could_open_a_panic(start: bytes) -> bool:
    """Whether the start of a line may still turn out to be a panic's first line."""
    return start.startswith(b"thread '") or b"thread '".startswith(start)


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte (a write to a pipe or terminal may be partial)."""
    while data:
        data = data[os.write(fd, data) :]


@contextmanager
def kept_off_stderr() -> Iterator[None]:
    """Within the block (any thread), Rust panic text written to stderr is dropped and every
    other line passes; blocks of several threads share one pipe."""
    global _users, _saved_fd, _write_fd, _forwarder
    with _lock:
        if _users == 0:
            try:
                read_fd, write_fd = os.pipe()
            except OSError:  # no descriptor left: the panic text may show, nothing worse
                read_fd = None
            if read_fd is not None:
                saved = os.dup(2)
                thread = threading.Thread(
                    target=_forward, args=(read_fd, saved), name="rust-panics", daemon=True
                )
                thread.start()
                os.dup2(write_fd, 2)
                _saved_fd, _write_fd, _forwarder = saved, write_fd, thread
        entered = _forwarder is not None
        _users += entered
    try:
        yield
    finally:
        with _lock:
            _users -= entered
            if entered and _users == 0:
                os.dup2(_saved_fd, 2)
                os.close(_write_fd)  # the forwarder reads to the end, then stops
                _forwarder.join(timeout=5)
                os.close(_saved_fd)
                _saved_fd = _write_fd = _forwarder = None
