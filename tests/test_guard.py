"""Read-only environments: writes are refused before they leave the process, and a whole
nightly run sends a read-only server nothing but allow-listed commands on named connections."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
import redis
from conftest import run_nightly, write_config

from yardstick.access.connect import open_client
from yardstick.access.guard import (
    ReadOnlyConnection,
    ReadOnlySSLConnection,
    ReadOnlyViolation,
    check_read_only,
)
from yardstick.settings.config import Environment

END_MARK = "yardstick-test-end-of-watch"


class Watcher:
    """A MONITOR connection on a plain client, read by a thread until END_MARK is echoed."""

    def __init__(self, observer: redis.Redis) -> None:
        self.observer = observer
        self.events: list[dict] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._error: BaseException | None = None

    def _watch(self) -> None:
        try:
            with self.observer.monitor() as monitor:
                self._ready.set()
                for event in monitor.listen():
                    if END_MARK in event["command"]:
                        return
                    self.events.append(event)
        except BaseException as exc:  # a watch that died saw only part of the run
            self._error = exc

    def __enter__(self) -> Watcher:
        self._thread.start()
        assert self._ready.wait(5)
        # MONITOR is active once the server answered it; an echoed mark proves it.
        self.observer.echo("yardstick-test-watch-started")
        return self

    def __exit__(self, *exc: object) -> None:
        self.observer.echo(END_MARK)
        self._thread.join(10)
        assert not self._thread.is_alive(), "MONITOR never saw the end mark"
        assert self._error is None, f"MONITOR stopped early: {self._error!r}"

    def commands(self, exclude_addr: str | None = None) -> list[tuple[str, ...]]:
        """Every monitored command as a tuple of words (our own observer's left out)."""
        return [tuple(e["command"].split()) for e in self._by(exclude_addr)]

    def _by(self, exclude_addr: str | None) -> list[dict]:
        return [
            e
            for e in self.events
            if f"{e['client_address']}:{e['client_port']}" != exclude_addr
            and "yardstick-test-watch-started" not in e["command"]
        ]

    def per_connection(self, exclude_addr: str | None = None) -> dict[str, list[tuple[str, ...]]]:
        """Commands grouped by client address, in order."""
        grouped: dict[str, list[tuple[str, ...]]] = defaultdict(list)
        for e in self._by(exclude_addr):
            grouped[f"{e['client_address']}:{e['client_port']}"].append(tuple(e["command"].split()))
        return dict(grouped)


def _observer(server) -> redis.Redis:
    """A plain (unguarded) client on one connection, used to watch and to check the server."""
    return redis.Redis(
        host="127.0.0.1",
        port=server.port,
        decode_responses=True,
        single_connection_client=True,
        client_name="test-observer",
        # redis-py 8 times reads out after 5 s: a run can leave MONITOR quiet for longer.
        socket_timeout=300,
    )


def _commandstats(observer: redis.Redis) -> dict[str, dict[str, int]]:
    """INFO commandstats as {command: counters}, parsed by redis-py (not by access/info.py)."""
    return {
        key.removeprefix("cmdstat_"): value for key, value in observer.info("commandstats").items()
    }


def _changed(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """Commands whose calls, rejected or failed counters moved between two snapshots."""
    moved = {}
    for command, counters in after.items():
        old = before.get(command, {})
        delta = {
            k: counters.get(k, 0) - old.get(k, 0)
            for k in ("calls", "rejected_calls", "failed_calls")
        }
        if any(delta.values()):
            moved[command] = delta
    return moved


def _version(observer: redis.Redis) -> tuple[int, ...]:
    """The server's version, e.g. (6, 2, 14)."""
    return tuple(int(p) for p in observer.info("server")["redis_version"].split("."))


def _stat_name(command: str, version: tuple[int, ...]) -> str:
    """How INFO commandstats names `config|get` on this version: before 7.0 it counts every
    subcommand under the container's name (`config`)."""
    return command if version >= (7, 0) else command.split("|")[0]


# Before 7.0 these are counted as one name for all subcommands, reads and writes alike.
CONTAINERS = {"CONFIG", "CLIENT", "SLOWLOG", "OBJECT", "MEMORY", "LATENCY", "COMMAND", "ACL"}


def _words(command: str) -> tuple[str, ...]:
    """`config|get` -> ('CONFIG', 'GET'), as the guard sees it."""
    return tuple(command.upper().split("|"))


WRITES = {
    "SET": lambda c: c.set("k", "changed"),
    "DEL": lambda c: c.delete("k"),
    "FLUSHALL": lambda c: c.flushall(),
    "CONFIG SET": lambda c: c.config_set("hz", 50),
    "CONFIG RESETSTAT": lambda c: c.config_resetstat(),
    "SLOWLOG RESET": lambda c: c.slowlog_reset(),
    "raw config set": lambda c: c.execute_command("config set", "hz", "50"),
    "raw bytes": lambda c: c.execute_command(b"flushdb"),
    "EXPIRE": lambda c: c.expire("k", 1),
    "GETDEL": lambda c: c.getdel("k"),
    "LATENCY RESET": lambda c: c.execute_command("LATENCY", "RESET"),
    "CLIENT KILL": lambda c: c.execute_command("CLIENT", "KILL", "TYPE", "normal"),
    "MONITOR": lambda c: c.execute_command("MONITOR"),
}


def test_writes_are_refused_before_they_are_sent(redis_server):
    observer = _observer(redis_server)
    observer.set("k", "original")
    observer.slowlog_reset()
    hz_before = observer.config_get("hz")["hz"]
    env = Environment(name="ro", url=redis_server.url, mode="read-only")
    guarded = open_client(env, "guard-test")
    assert guarded.ping()  # connects (and names itself) before the watch starts
    stats_before = _commandstats(observer)

    with Watcher(observer) as watch:
        for label, write in WRITES.items():
            with pytest.raises(ReadOnlyViolation):
                write(guarded)
            assert label  # keeps the label in the traceback when the line above fails
        # A pipeline is refused as a whole: its harmless PING never goes out either.
        pipe = guarded.pipeline(transaction=False)
        pipe.ping().set("k", "changed").dbsize()
        with pytest.raises(ReadOnlyViolation):
            pipe.execute()
        with pytest.raises(ReadOnlyViolation):  # MULTI is not a read command
            guarded.pipeline(transaction=True).get("k").execute()
        # Positive control: reads pass, and the watch does see this client's traffic.
        assert guarded.exists("k") == 1 and guarded.dbsize() == 1
        assert guarded.ping()

    seen = watch.commands(exclude_addr=observer.client_info()["addr"])
    assert seen == [("EXISTS", "k"), ("DBSIZE",), ("PING",)]
    moved = _changed(stats_before, _commandstats(observer))
    # Only what the observer sent (its MONITOR connection's handshake, INFO, CLIENT INFO,
    # MONITOR, ECHO) and the three reads moved. CONFIG and SLOWLOG are admin commands that
    # MONITOR never shows, so commandstats decides for them.
    version = _version(observer)
    observer_sent = {
        _stat_name(c, version)
        for c in ("hello", "client|setname", "client|info", "info", "monitor", "echo")
    }
    assert set(moved) <= observer_sent | {"exists", "dbsize", "ping"}, moved
    assert moved["ping"]["calls"] == 1
    # Nothing was changed or reset.
    assert observer.get("k") == "original"
    assert observer.config_get("hz")["hz"] == hz_before
    stats_after = _commandstats(observer)
    assert all(stats_after[c]["calls"] >= stats_before[c]["calls"] for c in stats_before)
    guarded.close()
    observer.close()


def test_the_guard_keeps_the_connection_usable_after_a_refusal(redis_server):
    env = Environment(name="ro", url=redis_server.url, mode="read-only")
    guarded = open_client(env, "guard-test")
    with pytest.raises(ReadOnlyViolation):
        guarded.set("k", "v")
    assert guarded.ping() and guarded.config_get("maxmemory") == {"maxmemory": "0"}
    guarded.close()


def test_scratch_environments_are_not_guarded(redis_server):
    env = Environment(name="s", url=redis_server.url, mode="scratch")
    client = open_client(env, "guard-test")
    assert client.set("k", "v") and client.delete("k") == 1
    client.close()


@pytest.mark.parametrize("connection_class", [ReadOnlyConnection, ReadOnlySSLConnection])
def test_both_guarded_connection_classes_refuse_at_packing(connection_class):
    # Packing happens before any byte is written: no server is needed to prove it.
    connection = connection_class(host="127.0.0.1", port=1)
    with pytest.raises(ReadOnlyViolation):
        connection.pack_command("SET", "k", "v")
    with pytest.raises(ReadOnlyViolation):
        connection.pack_commands([("PING",), ("FLUSHALL",)])
    assert connection.pack_command("CONFIG", "GET", "save")


@pytest.mark.parametrize(
    "args",
    [
        ("PING",),
        (b"info", b"server"),
        ("CONFIG", "GET", "save"),
        ("config get", "save"),
        ("SLOWLOG", "GET", "128"),
        ("slowlog", "len"),
        ("LATENCY", "LATEST"),
        ("MEMORY", "USAGE", "k", "SAMPLES", "0"),
        ("SCAN", "0", "TYPE", "hash"),
        ("CLIENT", "SETNAME", "yardstick-x"),
        ("CLIENT", "NO-TOUCH", "ON"),  # the key-space scan: this connection's reads touch no key
        ("client", "no-touch", "off"),
        ("AUTH", "pw"),
        ("HELLO", "2"),
        (memoryview(b"DBSIZE"),),
        ("MODULE", "LIST"),  # module key types recognised
        ("GRAPH.MEMORY", "USAGE", "g"),  # a graph's size: MEMORY USAGE leaves it out
        ("graph.memory", "usage", "g", "SAMPLES", "100"),
    ],
)
def test_allow_list_accepts_reads(args):
    check_read_only(args)


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("SET", "k", "v"),
        ("CONFIG", "SET", "hz", "5"),
        ("config set", "hz"),
        ("CONFIG",),
        ("CONFIG", "RESETSTAT"),
        ("SLOWLOG", "RESET"),
        ("LATENCY", "RESET"),
        ("MEMORY", "PURGE"),
        ("CLIENT", "KILL", "ID", "1"),
        ("CLIENT", "PAUSE", "10"),
        ("DEBUG", "SLEEP", "1"),
        ("EVAL", "return 1", "0"),
        ("FLUSHALL",),
        ("SHUTDOWN",),
        ("MONITOR",),
        ("SUBSCRIBE", "x"),
        ("CLIENT", "MAINT_NOTIFICATIONS", "ON"),
        ("GET", "k"),  # values are never read on read-only environments
        ("MODULE", "LOAD", "/tmp/x.so"),
        ("MODULE", "UNLOAD", "graph"),
        ("GRAPH.MEMORY",),
        ("GRAPH.QUERY", "g", "CREATE ()"),
        ("GRAPH.RO_QUERY", "g", "MATCH (n) RETURN n"),  # reads values: never
        ("GRAPH.DELETE", "g"),
    ],
)
def test_allow_list_refuses_everything_else(args):
    with pytest.raises(ReadOnlyViolation, match="refused"):
        check_read_only(args)


@pytest.mark.e2e
def test_nightly_run_sends_a_read_only_server_only_reads_on_named_connections(
    prefect_server, redis_server, tmp_path
):
    observer = _observer(redis_server)
    observer.set("app:key", "precious")
    observer_addr = observer.client_info()["addr"]
    config = write_config(
        tmp_path / "envs.yaml",
        [{"name": "prod-ro", "url": redis_server.url, "mode": "read-only"}],
    )
    stats_before = _commandstats(observer)
    config_before = observer.config_get("*")
    with Watcher(observer) as watch:
        state, summary = run_nightly(tmp_path, config_path=str(config))
    stats_after = _commandstats(observer)
    version = _version(observer)
    assert state.is_completed(), state.message
    assert [(o.env, o.status) for o in summary.outcomes] == [("prod-ro", "ok")]

    # 1. MONITOR: every command of every connection the run opened passes the guard.
    commands = watch.commands(exclude_addr=observer_addr)
    assert len(commands) > 100  # the PING probe ran (the watch really saw the run)
    refused = []
    for words in commands:
        try:
            check_read_only(words)
        except ReadOnlyViolation:
            refused.append(words)
    assert refused == []

    # 2. Commandstats (MONITOR hides admin commands such as CONFIG GET): every command whose
    # counters moved is allow-listed, apart from what the observer sent itself.
    moved = _changed(stats_before, stats_after)
    assert moved["ping"]["calls"] > 100
    assert _stat_name("config|get", version) in moved  # admin commands are visible here
    for command in set(moved) - {"monitor", "echo", "info"}:
        words = _words(command)
        if len(words) == 1 and words[0] in CONTAINERS and version < (7, 0):
            continue  # CONFIG GET and SET share one counter here: the config check decides
        check_read_only(words)
    # Every setting is as it was (on 6.x the only proof that no CONFIG SET was sent).
    assert observer.config_get("*") == config_before
    assert not {"set", "del", "flushall", "config|set", "config|resetstat", "slowlog|reset"} & set(
        moved
    )
    assert observer.get("app:key") == "precious"
    assert observer.dbsize() == 1

    # 3. Every connection the tool opened named itself yardstick-<role> before doing anything.
    connections = watch.per_connection(exclude_addr=observer_addr)
    assert len(connections) >= 2
    if version < (7, 0):
        # CLIENT is an admin command before 7.0: MONITOR never shows CLIENT SETNAME. Each
        # connection's CLIENT call is still counted.
        assert moved["client"]["calls"] >= len(connections)
        connections = {}
    for addr, words in connections.items():
        setnames = [i for i, w in enumerate(words) if w[:2] == ("CLIENT", "SETNAME")]
        assert setnames, f"{addr} never named itself: {words[:5]}"
        first = setnames[0]
        assert words[first][2].startswith("yardstick-"), words[first]
        assert all(w[0] in {"AUTH", "HELLO"} for w in words[:first]), words[: first + 1]

    # The report exists and the round trip was measured on the read-only server.
    report = (tmp_path / "out" / "prod-ro.md").read_text()
    assert "read-only environment" in report and "client_over_server_ping" in report
    observer.close()
