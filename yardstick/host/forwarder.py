"""A TCP port forwarder (socat) on 127.0.0.1, so the embedded default can show what a
forwarded path costs next to the direct one."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

from yardstick.host.embedded import free_port

START_TIMEOUT_S = 5.0


def socat_path() -> str | None:
    """Where socat is, if installed."""
    return shutil.which("socat")


class Forwarder:
    """socat listening on a free loopback port, forwarding each connection to `target_port`."""

    def __init__(self, target_port: int, socat: str | None = None) -> None:
        self.target_port = target_port
        self.socat = socat or socat_path()
        if self.socat is None:
            raise RuntimeError("socat not installed")
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis:// URL through the forwarder."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Forwarder:
        """Start socat and wait until its port accepts connections."""
        self.port = free_port()
        self._process = subprocess.Popen(
            [
                self.socat,
                f"TCP-LISTEN:{self.port},bind=127.0.0.1,reuseaddr,fork",
                f"TCP:127.0.0.1:{self.target_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its forked children die with the group
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"socat did not listen on 127.0.0.1:{self.port}")

    def stop(self) -> None:
        """Stop socat and every connection it forked."""
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()

    def __enter__(self) -> Forwarder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
