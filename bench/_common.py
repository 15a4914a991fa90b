"""What the bench scripts share (a module beside them, not a package): the SQL copy, free ports,
interleaved rounds, the machine's load, the git revision, versions, and JSON output."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_average() -> dict[str, float | int]:
    """The load averages (1, 5, 15 min) and the number of cores."""
    one, five, fifteen = os.getloadavg()
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "cores": os.cpu_count() or 1}


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
        "machine": load_average(),
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
