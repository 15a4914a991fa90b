"""delta-rs's Rust panic text never reaches the terminal; every other line written meanwhile
(any thread, Python or not) does, in order."""

from __future__ import annotations

import os

from yardstick.storage import panics

PANIC = (
    b"\nthread 'tokio-rt-worker' (13443) panicked at /home/runner/.cargo/registry/src/"
    b"object_store-0.13.2/src/buffered.rs:369:41:\nAlready shut down\nstack backtrace:\n"
    b"note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.\n"
)


def test_a_panic_is_kept_off_stderr_and_other_lines_pass(capfd):
    with panics.kept_off_stderr():
        os.write(2, b"before\n")
        with panics.kept_off_stderr():  # nested (another thread's call): one pipe
            os.write(2, PANIC)
        os.write(2, b"after\n\nlast")
        os.write(2, b" line\r\x1b[2Kredrawn")  # a progress line: never held back
    os.write(2, b"\n")
    assert capfd.readouterr().err == "before\nafter\n\nlast line\r\x1b[2Kredrawn\n"
    assert "panicked at" in panics.swallowed[-1]
