"""A private Prefect API server for one CLI run (no PREFECT_API_URL configured).

Prefect's own ephemeral server starts in the run's process group, so the terminal's Ctrl-C
killed it at once while the run still had servers to restore, and its start timed out under
load with a 60-line traceback. This one runs the same app (uvicorn, the same settings) in its
own session, dies with the CLI even on kill -9 (Linux parent-death signal), records its pid
so that a leftover one is stopped by the next run, and its start is retried once with a
longer wait before failing in one line."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

from yardstick.host.embedded import free_port, stop_process

START_TIMEOUT_S = 60.0
ATTEMPTS = 2
PIDFILE = "server.json"
_PR_SET_PDEATHSIG = 1


class PrefectServerFailed(Exception):
    """The private Prefect server did not answer."""


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the CLI that started it dies, however."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the pid file lets the next run stop a leftover server


def _is_our_server(pid: int) -> bool:
    """Whether `pid` is alive and a uvicorn serving Prefect's app (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"uvicorn" in cmdline and b"prefect.server.api.server:create_app" in cmdline


def stop_leftover(home: Path) -> str | None:
    """Stop the server a killed run left behind (its pid file says which); say what was done."""
    pidfile = home / PIDFILE
    try:
        facts = json.loads(pidfile.read_text())
    except (OSError, ValueError):
        return None
    pidfile.unlink(missing_ok=True)
    pid = int(facts.get("pid", 0))
    if not pid or not _is_our_server(pid):
        return None
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not _is_our_server(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    return f"stopped a Prefect server (pid {pid}) left by a run that was killed"


class PrivatePrefectServer:
    """Start, wait for, and stop a Prefect API server whose state lives in `home`."""

    def __init__(self, home: Path, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.home = home
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.cleaned: str | None = None

    @property
    def api_url(self) -> str:
        """The API address clients use."""
        return f"http://127.0.0.1:{self.port}/api"

    def _spawn(self) -> subprocess.Popen:
        self.port = free_port()
        log = open(self.home / "server.log", "ab")  # noqa: SIM115 (the child keeps it)
        env = {
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
        }
        env.pop("PREFECT_API_URL", None)
        try:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--factory",
                    "prefect.server.api.server:create_app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "error",
                    "--lifespan",
                    "on",
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # Its own session: the terminal's Ctrl-C reaches the CLI only, which still
                # needs the server to record how the run ended.
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (started before any thread)
            )
        finally:
            log.close()

    def _healthy(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                return False
            try:
                with urlopen(f"{self.api_url}/health", timeout=2) as response:
                    if response.status == 200:
                        return True
            except (URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def spawn(self) -> PrivatePrefectServer:
        """Start the server process (stopping a leftover one first) without waiting for it:
        the CLI imports its flows meanwhile."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.cleaned = stop_leftover(self.home)
        self._spawn_recorded()
        return self

    def _spawn_recorded(self) -> None:
        self.process = self._spawn()
        (self.home / PIDFILE).write_text(json.dumps({"pid": self.process.pid, "port": self.port}))

    def wait(self) -> PrivatePrefectServer:
        """Wait until the spawned server answers; started once more, with twice the wait,
        when it does not; PrefectServerFailed in one line after that."""
        timeout_s = self.start_timeout_s
        for attempt in range(ATTEMPTS):
            if attempt:
                self._spawn_recorded()
            if self._healthy(timeout_s):
                return self
            self.stop()
            timeout_s *= 2  # a loaded machine: give the second start more time
        last = _last_line(self.home / "server.log")
        raise PrefectServerFailed(
            f"the run's Prefect server did not answer within {self.start_timeout_s:.0f} s "
            f"then {timeout_s / 2:.0f} s{': ' + last if last else ''} "
            f"(log: {self.home / 'server.log'}; or set PREFECT_API_URL to a running server)"
        )

    def stop(self) -> None:
        """Stop the server and forget its pid file."""
        stop_process(self.process, grace_s=10)
        self.process = None
        (self.home / PIDFILE).unlink(missing_ok=True)


def _last_line(path: Path) -> str:
    """The last non-empty line of a log file ('' when none)."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:200] if lines else ""
