"""The one harness every bench script uses (a module beside them, not a package): its command
line (--rounds, --json, --tiny), its JSON record (bench, argv, machine, start and end, CPU-s,
each figure with its unit and target), the app's own Prefect server, free ports, interleaved
rounds, the machine's load, the git revision and versions. bench/compare.py reads two records."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from yardstick.host.embedded import free_port  # noqa: F401 - the benches' one free-port helper

REPO = Path(__file__).resolve().parents[1]
# The synthetic lakes (tests/lakes/: hand-made runs, and schedules at scale) and the tests'
# topologies, importable as the tests import them: the one place a bench reaches into tests/.
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))
FORMAT = "yardstick-bench/1"  # the record's format, bumped when its harness keys change


@dataclass(frozen=True)
class Figure:
    """One figure of a run: its value, unit, and target where the bench has one."""

    name: str
    value: float | None
    unit: str
    target: float | None = None
    better: str = "lower"  # "lower" or "higher": which way the target is met

    @property
    def met(self) -> bool | None:
        """Whether the target is met (None without a target or a value)."""
        if self.target is None or self.value is None:
            return None
        return self.value <= self.target if self.better == "lower" else self.value >= self.target


class Bench:
    """One bench run: the shared command line, then its figures and one JSON record."""

    def __init__(
        self, name: str, doc: str, rounds: int | None = 3, tiny: str = "the test size"
    ) -> None:
        """`rounds` None: the bench runs once (--rounds is accepted at 1 only)."""
        self.name = name
        self.repeats = rounds is not None
        self.parser = argparse.ArgumentParser(
            prog=f"bench/{name}.py", description=" ".join(doc.split("\n\n")[0].split())
        )
        self.parser.add_argument(
            "--rounds",
            type=int,
            default=rounds or 1,
            help=f"rounds (median; default {rounds})" if rounds else "1: this bench runs once",
        )
        self.parser.add_argument("--json", type=Path, help="write the run's record here")
        self.parser.add_argument("--tiny", action="store_true", help=f"seconds: {tiny}")
        self.figures: list[Figure] = []
        self.argv = list(sys.argv)
        self.started = datetime.now(UTC)
        self._cpu_start_s = _cpu_s()

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        """One of the bench's own options."""
        return self.parser.add_argument(*args, **kwargs)

    def parse(self, argv: list[str] | None = None) -> argparse.Namespace:
        """The parsed command line; --rounds below 1 is refused in one line."""
        args = self.parser.parse_args(argv)
        if args.rounds < 1:
            self.parser.error("--rounds must be at least 1")
        if args.rounds != 1 and not self.repeats:
            self.parser.error(f"--rounds: {self.name} runs once (its sizes are its own options)")
        return args

    def figure(
        self,
        name: str,
        value: float | None,
        unit: str,
        target: float | None = None,
        better: str = "lower",
    ) -> None:
        """Record one figure (compare.py puts two runs' figures side by side)."""
        self.figures.append(
            Figure(name, None if value is None else float(value), unit, target, better)
        )

    def record(self, own: dict | None = None) -> dict:
        """The run's record: the harness's keys, then the bench's own (which keep their names)."""
        ended = datetime.now(UTC)
        head = {
            "format": FORMAT,
            "bench": self.name,
            "argv": self.argv,
            "started": self.started.isoformat(timespec="seconds"),
            "ended": ended.isoformat(timespec="seconds"),
            "duration_s": (ended - self.started).total_seconds(),
            "cpu_s": _cpu_s() - self._cpu_start_s,
            "environment": environment_record(),
            "metrics": [asdict(f) | {"met": f.met} for f in self.figures],
        }
        clash = sorted(set(head) & set(own or {}) - {"bench", "environment", "argv"})
        if clash:
            raise ValueError(f"bench record keys taken by the harness: {clash}")
        return head | (own or {}) | {"bench": self.name}

    def write(self, path: Path | None, own: dict | None = None) -> dict:
        """Write the record to `path` (when given) and return it."""
        record = self.record(own)
        if path is not None:
            write_json(path, record)
            print(f"figures: {path}")
        return record


def _cpu_s() -> float:
    """CPU-seconds of this process and its reaped children (user + system)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def prefect_env(home: Path) -> dict[str, str]:
    """This process's environment without PREFECT_* settings, with a private PREFECT_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        # The server writes received events every second instead of every 5 s: a bench that
        # waits for the database to settle waits less; the rows written are the same.
        PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL="1",
    )
    return env


@contextmanager
def prefect_server(
    home: Path, use_here: bool = False, settings: dict[str, str] | None = None
) -> Iterator:
    """The app's own private Prefect server (yardstick/app/prefect_server.py) with its state in
    `home`, PREFECT_* settings cleared but `settings`; `use_here` also points this process's
    Prefect at it (for flows called here) and keeps those settings here. Yields the
    PrivatePrefectServer (its api_url, its process)."""
    from yardstick.app.prefect_server import PrivatePrefectServer

    home.mkdir(parents=True, exist_ok=True)
    saved = dict(os.environ)
    fresh = {**prefect_env(home), **(settings or {})}  # read before clearing: PATH, HOME stay
    os.environ.clear()
    os.environ.update(fresh)
    try:
        server = PrivatePrefectServer(home, start_timeout_s=120).spawn().wait()
    finally:
        if not use_here:
            os.environ.clear()
            os.environ.update(saved)
    pointed = None
    try:
        if use_here:
            os.environ["PREFECT_API_URL"] = server.api_url
            from prefect.settings import PREFECT_API_URL, temporary_settings

            pointed = temporary_settings(updates={PREFECT_API_URL: server.api_url})
            pointed.__enter__()
        yield server
    finally:
        if pointed is not None:
            pointed.__exit__(None, None, None)
        server.stop()


def stop_tree(process: subprocess.Popen | None, grace_s: float = 20.0) -> None:
    """SIGTERM a child, its process group and every descendant (flow-run processes a worker
    starts in sessions of their own included); SIGKILL what is left after `grace_s`."""
    if process is None:
        return
    import signal

    import psutil

    try:
        root = psutil.Process(process.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        tree = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)  # started with start_new_session: its own group
        except OSError:
            pass
        for proc in tree:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        _gone, tree = psutil.wait_procs(tree, timeout=wait_s)
        if not tree:
            break
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def copy_sql(work: Path) -> Path:
    """A copy of the dbt project as it is now (target/ and logs/ left out), so a bench's dbt
    state never meets the tests' or the tool's."""
    from yardstick.storage import dbt

    target = work / "sql"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(
        dbt.project_dir(), target, ignore=shutil.ignore_patterns("target", "logs", "__pycache__")
    )
    return target


def load_average() -> dict[str, float | int]:
    """The load averages (1, 5, 15 min) and the number of cores."""
    one, five, fifteen = os.getloadavg()
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "cores": os.cpu_count() or 1}


def machine() -> dict[str, object]:
    """The machine a figure was measured on: its load, cores, CPU model, memory and system."""
    cpu = ""
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        cpu = platform.processor()
    return {
        **load_average(),
        "cpu": cpu,
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "system": platform.platform(),
        "hostname": platform.node(),
    }


def load_line() -> str:
    """The 1-minute load average, with the number of cores, for a human line."""
    return f"{os.getloadavg()[0]:.2f} (1 min, {os.cpu_count()} cores)"


def git_revision() -> dict[str, object]:
    """The commit checked out, and which files differ from it (what a figure was measured on)."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""

    # Porcelain lines are "XY path": not stripped, the first column may be a space.
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": git("rev-parse", "HEAD").strip() or None,
        "modified": sorted(line[3:] for line in status.splitlines() if line.strip()),
    }


def versions() -> dict[str, str]:
    """Python and the libraries a bench's figures depend on."""
    out = {"python": sys.version.split()[0]}
    for name in ("duckdb", "pyarrow", "numpy", "dbt.version", "prefect", "redis"):
        try:
            module = __import__(name, fromlist=["_"])
        except ImportError:
            continue
        key = "dbt_core" if name == "dbt.version" else name
        out[key] = str(getattr(module, "__version__", getattr(module, "installed", "?")))
    return out


def interleaved(
    variants: dict[str, Callable[[], float]], rounds: int, rotate: bool = True
) -> dict[str, list[float]]:
    """Run each variant once per round, the order rotated each round (so drift in the machine's
    load spreads over all variants); the figures of each variant, round by round."""
    names = list(variants)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names) if rotate else 0
        for name in names[shift:] + names[:shift]:
            out[name].append(variants[name]())
    return out


def environment_record() -> dict[str, object]:
    """What every bench JSON carries about where and when it ran."""
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_revision(),
        "machine": machine(),
        "versions": versions(),
        "argv": sys.argv,
    }


def write_json(path: Path, data: dict) -> Path:
    """Write a bench's figures as JSON (atomically: a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False, default=_default) + "\n")
    tmp.replace(path)
    return path


def _default(value: object) -> object:
    """JSON for what json does not know: paths, sets, dates."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")
