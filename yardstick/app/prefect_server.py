"""A private Prefect API server for one CLI run (no PREFECT_API_URL configured).

Prefect's own ephemeral server starts in the run's process group, so the terminal's Ctrl-C
killed it at once while the run still had servers to restore, and its start timed out under
load with a 60-line traceback. This one runs the same app (uvicorn, the same settings) in its
own session, dies with the CLI even on kill -9 (Linux parent-death signal), records its pid
so that a leftover one is stopped by the next run, and its start is retried once with a
longer wait before failing in one line.

Every run has its own server (port, pid file `server-<CLI pid>.json`), all on the folder's
one SQLite database: a server is a leftover only once the CLI that owns it is gone (its pid
and start time no longer match), so a run started by hand never stops the one cron started.
Starts are taken one at a time (a lock held until the server answers): two servers creating
or migrating one new database at once would collide. A folder without a database starts from
a copy of an empty one migrated once per Prefect version (seed_database): Prefect's
migrations cost ~7 s of CPU, three times the rest of a server's start."""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

from yardstick import locks
from yardstick.host.embedded import free_port, stop_process

START_TIMEOUT_S = 60.0
ATTEMPTS = 2
PIDFILE = "server.json"  # written by earlier versions: one server per folder
PIDFILES = "server-*.json"  # one per run: server-<CLI pid>.json
START_LOCK = "server-start.lock"
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


def _start_time(pid: int) -> str | None:
    """The process's start time since boot (field 22 of /proc/<pid>/stat); None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_alive(facts: dict) -> bool:
    """Whether the run that wrote a pid file still runs (a reused pid has another start)."""
    owner = int(facts.get("owner", 0) or 0)
    if owner:
        started = _start_time(owner)
        return started is not None and started == str(facts.get("owner_start", started))
    # An earlier version's file names no owner: the server's parent is its CLI while it runs
    # (once the CLI is gone the server is re-parented to init or a subreaper).
    pid = int(facts.get("pid", 0) or 0)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        argv = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        return False
    names = [Path(arg.decode(errors="replace")).name for arg in argv]
    return parent != 1 and any(
        name == "yardstick" and after == "run" for name, after in itertools.pairwise(names)
    )


def stop_leftover(home: Path) -> str | None:
    """Stop the servers of runs that are gone (their pid files say which); say what was
    done. A server whose run still runs is left alone: it is that run's."""
    said = []
    for pidfile in sorted([home / PIDFILE, *home.glob(PIDFILES)]):
        try:
            facts = json.loads(pidfile.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(facts, dict) or _owner_alive(facts):
            continue
        pidfile.unlink(missing_ok=True)
        pid = int(facts.get("pid", 0) or 0)
        if not pid or not _is_our_server(pid):
            continue
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not _is_our_server(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        owner = facts.get("owner")
        whose = f"run (pid {owner})" if owner else "run"
        said.append(f"stopped a Prefect server (pid {pid}) left by a {whose} that is gone")
    return "; ".join(said) or None


def database_template() -> Path:
    """Where the empty, migrated database of this Prefect version is kept (the user's cache)."""
    import prefect

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "yardstick" / "prefect-db" / f"prefect-{prefect.__version__}.db"


def seed_database(home: Path) -> bool:
    """Give a home without a database a copy of the migrated template (made first when
    missing, in a folder of its own); False when Prefect is told to use another database,
    the home has one, or the template cannot be made (the server then migrates its own)."""
    target = home / "prefect.db"
    if os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL") or target.exists():
        return False
    template = database_template()
    try:
        if not template.exists():
            _make_template(template)
        partial = target.with_name(f".prefect.db.{os.getpid()}")
        shutil.copyfile(template, partial)
        os.replace(partial, target)  # never a half-copied database under the real name
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def _make_template(template: Path) -> None:
    """Migrate an empty database with Prefect's own command, then move it into place (a
    concurrent maker's copy is as good: the last rename wins)."""
    import tempfile

    template.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=template.parent) as work:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=work, PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
            check=True,
        )
        made = Path(work) / "prefect.db"
        if not made.is_file() or Path(work, "prefect.db-wal").exists():
            raise OSError(f"{made}: no closed database after the migration")
        os.replace(made, template)


def _say(line: str) -> None:
    """Print a line for the person running the CLI."""
    print(line, file=sys.stderr, flush=True)


class PrivatePrefectServer:
    """Start, wait for, and stop a Prefect API server whose state lives in `home`."""

    def __init__(
        self,
        home: Path,
        start_timeout_s: float = START_TIMEOUT_S,
        on_wait: Callable[[str], None] = _say,
    ) -> None:
        self.home = home
        self.start_timeout_s = start_timeout_s
        self.on_wait = on_wait
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.cleaned: str | None = None
        self._start_lock = None  # held from spawn until the server answers

    @property
    def pidfile(self) -> Path:
        """This run's pid file."""
        return self.home / f"server-{os.getpid()}.json"

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
        self._take_start_lock()
        self.cleaned = stop_leftover(self.home)
        seed_database(self.home)
        self._spawn_recorded()
        return self

    def _take_start_lock(self) -> None:
        """One server start at a time in this home; say once whom this one waits for."""
        lock = locks.FileLock(
            self.home / START_LOCK,
            what=str(self.home),
            who="yardstick run",
            doing="starting its Prefect server",
            why="one start at a time on one database",
            on_wait=self.on_wait,
        )
        lock.acquire()  # held until the server answers
        self._start_lock = lock

    def _release_start_lock(self) -> None:
        """Let the next run start its server (the kernel does it if this process dies)."""
        lock, self._start_lock = self._start_lock, None
        if lock is not None:
            lock.release()

    def _spawn_recorded(self) -> None:
        self.process = self._spawn()
        facts = {
            "pid": self.process.pid,
            "port": self.port,
            "owner": os.getpid(),
            "owner_start": _start_time(os.getpid()),
        }
        self.pidfile.write_text(json.dumps(facts))

    def wait(self) -> PrivatePrefectServer:
        """Wait until the spawned server answers; started once more, with twice the wait,
        when it does not; PrefectServerFailed in one line after that."""
        timeout_s = self.start_timeout_s
        try:
            for attempt in range(ATTEMPTS):
                if attempt:
                    self._spawn_recorded()
                if self._healthy(timeout_s):
                    return self
                self.stop()
                timeout_s *= 2  # a loaded machine: give the second start more time
        finally:
            self._release_start_lock()
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
        self.pidfile.unlink(missing_ok=True)
        self._release_start_lock()


def _last_line(path: Path) -> str:
    """The last non-empty line of a log file ('' when none)."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:200] if lines else ""
