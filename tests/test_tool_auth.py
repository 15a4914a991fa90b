"""No secret on a command line: the wrapped C tools authenticate as a per-run ACL user whose
password is worthless after the run, never with the environment's password."""

from __future__ import annotations

import json
import secrets
import sys
import threading
from pathlib import Path

import pytest
import redis
from conftest import SAMPLES, needs_tool

from yardstick.host.tool_auth import USER_PREFIX, ToolCredentials, tool_credentials
from yardstick.host.tools import Tool, find_tool
from yardstick.settings.config import Environment
from yardstick.settings.profiles import MemtierProfile, ThroughputProfile
from yardstick.tasks.base import Skipped
from yardstick.tasks.memtier import memtier, memtier_args
from yardstick.tasks.throughput import benchmark_args, throughput

BENCHMARK = find_tool("redis-benchmark")
needs_benchmark = needs_tool("redis-benchmark")
PASSWORD_VAR = "YS_TOOL_AUTH_PASSWORD"
TINY = ThroughputProfile(
    clients=[1],
    pipelines=[1],
    payloads_bytes=[3],
    tests=["set", "get"],
    requests=20_000,
    repetitions=2,
    db=15,
    timeout_s=60,
)


class CommandLines:
    """Every process's command line, read from /proc every 0.05 s while running."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for path in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    text = path.read_bytes().replace(b"\0", b" ").decode("latin-1").strip()
                except OSError:
                    continue  # the process ended between listing and reading
                if text:
                    self.seen.add(text)
            self.samples += 1
            self._stop.wait(0.05)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _protected_server(start_redis, monkeypatch) -> tuple[str, redis.Redis, object]:
    password = "pw-" + secrets.token_urlsafe(24)
    server = start_redis(extra_args=["--requirepass", password])
    monkeypatch.setenv(PASSWORD_VAR, password)
    admin = redis.Redis(port=server.port, password=password, decode_responses=True)
    return password, admin, server


def _bench_users(admin: redis.Redis) -> list[str]:
    return [u for u in admin.acl_users() if u.startswith(USER_PREFIX)]


@needs_benchmark
def _benchmarks_of(lines: CommandLines, port: int) -> list[str]:
    """The redis-benchmark command lines aimed at this test's server (other tests run theirs
    at the same time on the same machine)."""
    return [line for line in lines.seen if "redis-benchmark" in line and f" -p {port} " in line]


@needs_benchmark
def test_redis_benchmark_never_sees_the_password_and_its_user_is_gone_after(
    start_redis, monkeypatch, caplog
):
    password, admin, server = _protected_server(start_redis, monkeypatch)
    # A user left by a run killed before its cleanup: the next run deletes it.
    admin.execute_command("ACL", "SETUSER", USER_PREFIX + "killedrun", "on", ">old", "+@all")
    env = Environment(name="s", url=server.url, mode="scratch", password_env=PASSWORD_VAR)

    with CommandLines() as lines:
        measured = throughput(env, TINY)

    rows = measured.tables["benchmark"].to_pylist()
    assert rows and all(r["status"] == "ok" for r in rows), rows[0].get("error")
    benchmarks = _benchmarks_of(lines, server.port)
    assert benchmarks, f"the sampler never saw redis-benchmark ({lines.samples} samples)"
    assert all(f"--user {USER_PREFIX}" in line for line in benchmarks)
    leaks = [line for line in lines.seen if password in line]
    assert leaks == []
    assert _bench_users(admin) == []
    assert "killedrun" in caplog.text  # the deletion is said, not silent
    assert any("killedrun" in note for note in measured.notes)  # and reaches the report
    assert password not in caplog.text
    # The benchmark's keys are gone and the server's own password still works.
    assert admin.execute_command("SELECT", 15) and admin.dbsize() == 0


@needs_benchmark
def test_no_per_run_user_means_no_benchmark(start_redis, monkeypatch):
    """A connection that may not create users: skipped with the reason, password unsaid."""
    password, admin, server = _protected_server(start_redis, monkeypatch)
    limited_pw = "limited-" + secrets.token_urlsafe(16)
    admin.execute_command(
        "ACL", "SETUSER", "limited", "on", f">{limited_pw}", "~*", "+@all", "-@admin"
    )
    monkeypatch.setenv("YS_TOOL_AUTH_LIMITED", limited_pw)
    url = server.url.replace("redis://", "redis://limited@")
    env = Environment(name="s", url=url, mode="scratch", password_env="YS_TOOL_AUTH_LIMITED")
    with CommandLines() as lines, pytest.raises(Skipped) as refused:
        throughput(env, TINY)
    message = str(refused.value)
    assert message.startswith("cannot create a per-run ACL user: ")
    assert "refusing to put the password on a command line" in message
    assert "NOPERM" in message or "permission" in message.lower()
    assert limited_pw not in message and password not in message
    assert not _benchmarks_of(lines, server.port)
    assert _bench_users(admin) == []


def test_without_a_password_no_user_is_created_and_none_is_passed(redis_server):
    env = Environment(name="s", url=redis_server.url, mode="scratch")
    tool = Tool(name="redis-benchmark", path="/usr/bin/redis-benchmark", version=(7, 0, 15))
    with tool_credentials(env) as credentials:
        assert credentials == ToolCredentials()
        args = benchmark_args(tool, env, 15, 1, 1, 3, 100, ["set"], credentials)
    assert "-a" not in args and "--user" not in args
    admin = redis.Redis(port=redis_server.port, decode_responses=True)
    assert _bench_users(admin) == []


def test_credentials_never_show_their_password():
    credentials = ToolCredentials(user=USER_PREFIX + "x", password="s3cret-value")
    assert "s3cret-value" not in repr(credentials) and "s3cret-value" not in str(credentials)


FAKE_MEMTIER = """#!{python}
import json, pathlib, shutil, sys
import redis
args = sys.argv[1:]
pathlib.Path({argv!r}).write_text(json.dumps(args))
auth = next(a.split("=", 1)[1] for a in args if a.startswith("--authenticate="))
user, password = auth.split(":", 1)
port = int(args[args.index("-p") + 1])
db = int(next(a.split("=", 1)[1] for a in args if a.startswith("--select-db=")))
# What memtier does with these credentials: AUTH user password, SELECT, SET and GET.
client = redis.Redis(port=port, username=user, password=password, db=db)
client.set("memtier-0", "x")
client.get("memtier-0")
out = next(a.split("=", 1)[1] for a in args if a.startswith("--json-out-file="))
shutil.copy({sample!r}, out)
"""


def test_memtier_authenticates_as_the_per_run_user(start_redis, monkeypatch, tmp_path):
    """memtier_benchmark is not packaged here: a fake one records its arguments and uses
    the credentials the way memtier does (--authenticate=USER:PASSWORD, Redis 6+)."""
    import yardstick.tasks.memtier as memtier_task

    password, admin, server = _protected_server(start_redis, monkeypatch)
    argv = tmp_path / "argv.json"
    fake = tmp_path / "memtier_benchmark"
    fake.write_text(
        FAKE_MEMTIER.format(
            python=sys.executable,
            argv=str(argv),
            sample=str(SAMPLES / "memtier-2.3.0-redis-7.0.15.json"),
        )
    )
    fake.chmod(0o755)
    monkeypatch.setattr(
        memtier_task, "find_tool", lambda name: Tool(name=name, path=str(fake), version=(2, 3, 0))
    )
    env = Environment(name="s", url=server.url, mode="scratch", password_env=PASSWORD_VAR)

    measured = memtier(env, MemtierProfile(repetitions=1, test_time_s=1))
    assert measured.tables["memtier"].num_rows == 3
    args = json.loads(argv.read_text())
    auth = [a for a in args if a.startswith("--authenticate=")]
    assert len(auth) == 1 and auth[0].startswith(f"--authenticate={USER_PREFIX}")
    assert not any(password in a for a in args)
    assert _bench_users(admin) == []
    admin.execute_command("SELECT", 15)
    assert admin.dbsize() == 0  # the fake's key was removed with the database


def test_memtier_args_hold_the_user_and_never_the_environment_password(monkeypatch, tmp_path):
    monkeypatch.setenv(PASSWORD_VAR, "real-password")
    env = Environment(
        name="s", url="redis://127.0.0.1:6379/0", mode="scratch", password_env=PASSWORD_VAR
    )
    tool = Tool(name="memtier_benchmark", path="/x/memtier_benchmark", version=(2, 3, 0))
    profile = MemtierProfile()
    plain = memtier_args(tool, env, profile, tmp_path / "o.json")
    assert not any("real-password" in a or a.startswith("--authenticate") for a in plain)
    per_run = ToolCredentials(user=USER_PREFIX + "abc", password="0123abcd")
    args = memtier_args(tool, env, profile, tmp_path / "o.json", per_run)
    assert f"--authenticate={USER_PREFIX}abc:0123abcd" in args
    assert not any("real-password" in a for a in args)
    bench = benchmark_args(
        Tool(name="redis-benchmark", path="/x/redis-benchmark", version=(7, 0, 15)),
        env,
        15,
        1,
        1,
        3,
        100,
        ["set"],
        per_run,
    )
    assert bench[bench.index("--user") + 1] == USER_PREFIX + "abc"
    assert bench[bench.index("-a") + 1] == "0123abcd"
    assert not any("real-password" in a for a in bench)


def test_the_user_is_deleted_even_when_the_tool_run_fails(start_redis, monkeypatch):
    _password, admin, server = _protected_server(start_redis, monkeypatch)
    env = Environment(name="s", url=server.url, mode="scratch", password_env=PASSWORD_VAR)
    with pytest.raises(RuntimeError), tool_credentials(env) as credentials:
        assert _bench_users(admin) == [credentials.user]
        user = redis.Redis(
            port=server.port,
            username=credentials.user,
            password=credentials.password,
            decode_responses=True,
        )
        assert user.ping()
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.config_get("requirepass")  # the real password stays out of reach
        raise RuntimeError("tool crashed")
    assert _bench_users(admin) == []
