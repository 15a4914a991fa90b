"""Which wrapped C tool runs, and the version it is known by: read only from a real version
line (never from an address in a usage text), else from redis-cli / redis-server beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from yardstick.host import tools
from yardstick.host.tools import find_tool, parse_version, search_tool, tool_facts

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
