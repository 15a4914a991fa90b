"""Leave a scratch server as it was found: every CONFIG SET is set back and every fixture key
removed, even when the measurement fails halfway (failures injected here on purpose)."""

from __future__ import annotations

import pytest
import redis

import yardstick.tasks.agreement as agreement_task
import yardstick.tasks.contention as contention_task
import yardstick.tasks.slow_commands as slow_commands_task
from yardstick.access.guard import ReadOnlyViolation
from yardstick.access.scratch import FIXTURE_PREFIX, NotScratch, config_changes, fixture_keys
from yardstick.settings.config import Environment
from yardstick.settings.profiles import AgreementProfile, ContentionProfile, SlowCommandsProfile

# Distinctive starting values, so that "restored" cannot be confused with "default".
START = [
    "--slowlog-log-slower-than",
    "12345",
    "--slowlog-max-len",
    "77",
    "--latency-monitor-threshold",
    "0",
]
WATCHED = ("slowlog-log-slower-than", "slowlog-max-len", "latency-monitor-threshold")


class Injected(Exception):
    """The failure a test injects halfway through a measurement."""


def settings(client: redis.Redis) -> dict[str, str]:
    """The settings experiments change, as the server has them now."""
    return {key: client.config_get(key)[key] for key in WATCHED}


def fixture_count(client: redis.Redis) -> int:
    """Keys under the tool's fixture prefix."""
    return sum(1 for _ in client.scan_iter(match=f"{FIXTURE_PREFIX}*", count=1000))


@pytest.fixture
def server(start_redis):
    """A scratch server holding one key that belongs to someone else."""
    server = start_redis(extra_args=START)
    client = redis.Redis(port=server.port, decode_responses=True, protocol=2)
    client.set("app:keep-me", "not the tool's")
    server.client = client
    server.env = Environment(name="s", url=server.url, mode="scratch")
    before = settings(client)
    yield server
    # Whatever the test did: settings as found, the application's key untouched.
    assert settings(client) == before
    assert client.get("app:keep-me") == "not the tool's"
    assert fixture_count(client) == 0
    client.close()


def test_config_restored_when_the_block_fails(server):
    with pytest.raises(Injected):
        with config_changes(
            server.client, server.env, {"slowlog-log-slower-than": 0, "slowlog-max-len": 5}
        ):
            assert settings(server.client)["slowlog-max-len"] == "5"
            raise Injected


def test_config_restored_when_a_later_set_fails(server):
    with pytest.raises(redis.ResponseError):
        with config_changes(
            server.client,
            server.env,
            {"slowlog-log-slower-than": 0, "slowlog-max-len": "not-a-number"},
        ):
            pytest.fail("the block must not run when a CONFIG SET fails")


def test_fixture_keys_removed_when_the_block_fails(server):
    with pytest.raises(Injected):
        with fixture_keys(server.client, server.env) as prefix:
            server.client.rpush(f"{prefix}list", *range(100))
            server.client.mset({f"{prefix}str:{i}": i for i in range(2500)})
            raise Injected


def test_leftover_fixture_keys_of_a_dead_run_are_removed_first(server):
    server.client.set(f"{FIXTURE_PREFIX}left-by-a-crash", 1)
    with fixture_keys(server.client, server.env):
        assert fixture_count(server.client) == 0


def test_read_only_environment_is_refused_before_anything_is_sent(server):
    env = Environment(name="ro", url=server.url, mode="read-only")
    with pytest.raises(NotScratch):
        with config_changes(server.client, env, {"slowlog-log-slower-than": 0}):
            pytest.fail("never reached")
    with pytest.raises(NotScratch):
        slow_commands_task.slow_commands(env, SlowCommandsProfile())


def test_guard_also_refuses_config_set_on_read_only(server):
    """Belt and braces: even a bypassed check would meet the read-only connection."""
    from yardstick.access.connect import open_client

    env = Environment(name="ro", url=server.url, mode="read-only")
    client = open_client(env, "test")
    with pytest.raises(ReadOnlyViolation):
        client.config_set("slowlog-log-slower-than", 0)
    client.close()


def _fail_on_call(monkeypatch, server, module, name: str, call: int) -> dict:
    """Make `module.name` raise Injected on its `call`-th call (1-based); the returned dict
    then holds the server's state at the moment of failure."""
    real, calls, seen = getattr(module, name), [], {}

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            seen.update(settings(server.client), fixture_keys=fixture_count(server.client))
            raise Injected(f"{name} failed on call {call}")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return seen


def test_slow_commands_failing_halfway_leave_nothing_behind(server, monkeypatch):
    # The third SLOWLOG lookup: the threshold is at 0 and the fixtures are loaded.
    seen = _fail_on_call(monkeypatch, server, slow_commands_task, "find_own_entry", 3)
    profile = SlowCommandsProfile(
        list_len=2000, hash_fields=500, string_keys=1500, repetitions=2, get_calls=10
    )
    with pytest.raises(Injected):
        slow_commands_task.slow_commands(server.env, profile)
    # It failed halfway indeed: threshold lowered, fixtures loaded (the fixture checks the rest).
    assert seen["slowlog-log-slower-than"] == "0" and seen["fixture_keys"] > 1000


def test_contention_failing_during_the_loop_leaves_nothing_behind(server, monkeypatch):
    # The second probe window is the first one during the culprit's loop.
    seen = _fail_on_call(monkeypatch, server, contention_task, "probe_window", 2)
    profile = ContentionProfile(
        list_len=2000, before_s=0.1, during_s=0.2, after_s=0.1, window_s=0.1
    )
    with pytest.raises(Injected):
        contention_task.contention(server.env, profile)
    assert seen["slowlog-log-slower-than"] == "1000" and seen["slowlog-max-len"] != "77"
    assert seen["fixture_keys"] == 1


def test_agreement_failing_halfway_leaves_nothing_behind(server, monkeypatch):
    seen = _fail_on_call(monkeypatch, server, agreement_task, "find_own_entry", 1)
    with pytest.raises(Injected):
        agreement_task.agreement(server.env, AgreementProfile(list_len=2000))
    assert seen["latency-monitor-threshold"] == "1" and seen["fixture_keys"] == 1
