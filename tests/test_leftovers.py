"""Nothing poisons the next run: what a run killed outright (os._exit, as kill -9) left on a
scratch server -- benchmark keys, changed settings, fixture keys -- is cleaned by the next
run, which says so; keys the tool did not write are still refused."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from unittest import mock

import pytest
import redis
from conftest import missing_tool

from yardstick.access import benchdb, scratch
from yardstick.access.scratch import FIXTURE_PREFIX, INTENT_KEY, NotScratch, config_changes
from yardstick.settings.config import Environment

THRESHOLD = "12345"  # distinctive, so that "set back" cannot be confused with "default"
SETTING = "slowlog-log-slower-than"
BENCH_DB = 9

# Each child enters the block, then dies inside it without any cleanup (exit status 9).
BENCHMARK_CHILD = """
import os, sys
from yardstick.access.benchdb import empty_database
from yardstick.settings.config import Environment
from yardstick.host.tools import find_tool, run_tool
env, db = Environment(name="s", url=sys.argv[1], mode="scratch"), sys.argv[2]
tool = find_tool("redis-benchmark")
with empty_database(env, int(db), "throughput"):
    run_tool([tool.path, "-h", env.host, "-p", str(env.port), "--dbnum", db, "-n", "200",
              "-r", "50", "-t", "set,lpush", "-q"], timeout_s=30)
    os._exit(9)
"""
CONFIG_CHILD = """
import os, sys
import redis
from yardstick.settings.config import Environment
from yardstick.access.scratch import build_strings, config_changes, fixture_keys
env = Environment(name="s", url=sys.argv[1], mode="scratch")
client = redis.Redis.from_url(sys.argv[1], decode_responses=True, protocol=2)
with fixture_keys(client, env) as prefix:
    build_strings(client, f"{prefix}str:", 25)
    with config_changes(client, env, {"slowlog-log-slower-than": 0}):
        os._exit(9)
"""


def killed_child(code: str, *args: str) -> int:
    """Run `code` in a child Python that exits inside its block, without any cleanup;
    return the child's pid (the claim and the intents record it)."""
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 9, stderr
    return process.pid


@pytest.fixture
def server(start_redis):
    """A scratch server with a distinctive threshold and one key that belongs to someone else."""
    server = start_redis(extra_args=[f"--{SETTING}", THRESHOLD])
    client = redis.Redis(port=server.port, decode_responses=True, protocol=2)
    client.set("app:keep-me", "not the tool's")
    server.client = client
    server.bench = redis.Redis(port=server.port, db=BENCH_DB, decode_responses=True, protocol=2)
    server.env = Environment(name="s", url=server.url, mode="scratch")
    yield server
    assert client.get("app:keep-me") == "not the tool's"
    client.close()
    server.bench.close()


def threshold(client: redis.Redis) -> str:
    """The setting the tests change, as the server has it now."""
    return client.config_get(SETTING)[SETTING]


def fixture_count(client: redis.Redis) -> int:
    """Keys under the tool's fixture prefix."""
    return sum(1 for _ in client.scan_iter(match=f"{FIXTURE_PREFIX}*", count=1000))


# --- the benchmark database ------------------------------------------------------------------


def test_keys_of_a_killed_benchmark_are_removed_and_said(server):
    if why := missing_tool("redis-benchmark"):
        pytest.skip(why)
    pid = killed_child(BENCHMARK_CHILD, server.url, str(BENCH_DB))
    left = [k for k in server.bench.scan_iter() if k != benchdb.CLAIM_KEY]
    assert left and server.bench.exists(benchdb.CLAIM_KEY)  # died with its keys in place
    notes: list[str] = []
    with benchdb.empty_database(server.env, BENCH_DB, "throughput", notes) as client:
        # Only this run's claim is there when the tool would start writing.
        assert client.dbsize() == 1
        assert json.loads(client.get(benchdb.CLAIM_KEY))["pid"] == os.getpid()
        client.set("key:written-by-the-tool", 1)
    assert server.bench.dbsize() == 0
    assert len(notes) == 1
    assert notes[0].startswith(
        f"removed {len(left)} keys left in database {BENCH_DB} by an interrupted throughput run "
        f"(claimed "
    )
    assert f"by pid {pid} on host " in notes[0]


def test_recover_removes_a_dead_runs_keys_in_the_named_database(server):
    claim = {"role": "memtier", "pid": 123, "host": "x", "started_at": "2026-12-01T03:00:00Z"}
    server.bench.set(benchdb.CLAIM_KEY, json.dumps(claim))
    server.bench.mset({"memtier-1": 1, "memtier-2": 2, "memtier-3": 3})
    assert benchdb.recover(server.env, BENCH_DB) == [
        "removed 3 keys left in database 9 by an interrupted memtier run "
        "(claimed 2026-12-01T03:00:00Z by pid 123 on host x)"
    ]
    assert server.bench.dbsize() == 0
    assert benchdb.recover(server.env, BENCH_DB) == []  # nothing left the second time


def test_keys_without_a_claim_are_still_refused(server):
    server.bench.mset({"key:someone-else": 1, "mylist": 2})
    with pytest.raises(benchdb.ForeignKeys, match="holds 2 keys the tool did not write"):
        with benchdb.empty_database(server.env, BENCH_DB, "throughput", []):
            pytest.fail("never reached")
    assert benchdb.recover(server.env, BENCH_DB) == []
    assert server.bench.dbsize() == 2  # untouched either way


def test_emptying_between_runs_keeps_the_claim_until_the_end(server):
    """memtier empties the database between its runs: the claim must outlive that."""
    notes: list[str] = []
    with benchdb.empty_database(server.env, BENCH_DB, "memtier", notes) as client:
        client.mset({f"memtier-{i}": i for i in range(1200)})
        assert benchdb.remove_all(client) == 1200
        assert client.dbsize() == 1 and client.exists(benchdb.CLAIM_KEY)
        client.set("memtier-1", 1)
    assert server.bench.dbsize() == 0 and notes == []


# --- settings and fixture keys ---------------------------------------------------------------


def test_a_killed_runs_setting_is_set_back_and_said(server):
    pid = killed_child(CONFIG_CHILD, server.url)
    assert threshold(server.client) == "0" and fixture_count(server.client) == 25
    intent = json.loads(server.client.hget(INTENT_KEY, SETTING))
    assert (intent["from"], intent["to"], intent["pid"]) == (THRESHOLD, "0", pid)

    notes = scratch.recover(server.client, server.env)

    assert threshold(server.client) == THRESHOLD
    assert notes[0].startswith(
        f"set {SETTING} back to {THRESHOLD} (left at 0 by an interrupted run at "
    )
    assert f"(pid {pid} on host " in notes[0]
    assert notes[1:] == [f"removed 25 fixture keys ({FIXTURE_PREFIX}*) left by an interrupted run"]
    assert not server.client.exists(INTENT_KEY) and fixture_count(server.client) == 0
    assert scratch.recover(server.client, server.env) == []


def test_a_setting_changed_since_is_left_and_said(server):
    killed_child(CONFIG_CHILD, server.url)
    server.client.config_set(SETTING, 500)  # someone else, after the run died

    notes = scratch.recover(server.client, server.env)

    assert threshold(server.client) == "500"
    assert notes[0].startswith(f"left {SETTING} at 500: an interrupted run at ")
    assert f"had set it from {THRESHOLD} to 0, and it has changed since" in notes[0]
    assert not server.client.exists(INTENT_KEY)


def test_a_block_over_a_dead_runs_change_keeps_the_true_original(server):
    """A run that skipped recover found the dead run's 0 and set back to it; the intent,
    still there, lets the next recover reach the value from before the dead run."""
    killed_child(CONFIG_CHILD, server.url)
    with config_changes(server.client, server.env, {SETTING: 0}) as original:
        assert original == {SETTING: "0"}
    assert json.loads(server.client.hget(INTENT_KEY, SETTING))["from"] == THRESHOLD
    scratch.recover(server.client, server.env)
    assert threshold(server.client) == THRESHOLD


def test_the_intent_is_recorded_before_the_set_and_forgotten_after(server, monkeypatch):
    real_set, seen = server.client.config_set, []

    def config_set(name, value):
        seen.append(server.client.hget(INTENT_KEY, name))
        return real_set(name, value)

    monkeypatch.setattr(server.client, "config_set", config_set)
    with config_changes(server.client, server.env, {SETTING: 0, "slowlog-max-len": 5}):
        assert set(server.client.hkeys(INTENT_KEY)) == {SETTING, "slowlog-max-len"}
    # Every SET (the changes, then the restores) found its intent already recorded.
    assert len(seen) == 4 and all(seen)
    assert not server.client.exists(INTENT_KEY)
    with pytest.raises(redis.ResponseError):  # a SET refused halfway: set back, forgotten
        with config_changes(server.client, server.env, {SETTING: 0, "slowlog-max-len": "x"}):
            pytest.fail("never reached")
    assert threshold(server.client) == THRESHOLD and not server.client.exists(INTENT_KEY)


def test_fixture_keys_says_what_it_removed(server, caplog):
    server.client.set(f"{FIXTURE_PREFIX}left-by-a-crash", 1)
    with caplog.at_level(logging.WARNING, logger="yardstick.access.scratch"):
        with scratch.fixture_keys(server.client, server.env) as prefix:
            assert prefix == FIXTURE_PREFIX and fixture_count(server.client) == 0
    assert "removed 1 fixture key (yardstick:fixture:*) left by an interrupted run" in caplog.text


def test_tool_keys_start_with_the_prefix_the_memory_family_accepts():
    from yardstick.tasks.memory import TOOL_PREFIX

    assert INTENT_KEY.startswith(TOOL_PREFIX) and benchdb.CLAIM_KEY.startswith(TOOL_PREFIX)


# --- read-only environments ------------------------------------------------------------------


def test_read_only_environment_is_refused_before_anything_is_sent(server, monkeypatch):
    env = Environment(name="ro", url=server.url, mode="read-only")
    client = mock.Mock(spec=redis.Redis)
    with pytest.raises(NotScratch):
        scratch.recover(client, env)
    assert client.method_calls == []
    monkeypatch.setattr(benchdb, "open_client", mock.Mock(side_effect=AssertionError))
    with pytest.raises(NotScratch):
        benchdb.recover(env, BENCH_DB)
