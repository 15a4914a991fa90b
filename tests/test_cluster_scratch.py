"""Scratch work on a real Redis Cluster (3 primaries on loopback, database 0 only, beside keys
that are not the tool's): fixture keys and CONFIG intents carry the node's hash tag and never
meet a redirection; what a killed run left (intents, fixtures, a cluster benchmark's keys) is
removed by the next cleanup and nothing else is; throughput runs `redis-benchmark --cluster`
and leaves none of its keys; memory measures by difference beside the node's own keys."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis
from conftest import missing_tool
from redis.crc import key_slot
from topologies import Cluster, client, running, start_cluster

from yardstick.access import benchdb, scratch
from yardstick.access.environment import Environment
from yardstick.access.topology import Shape, discover, units_of
from yardstick.flows.landing import cleanup_step
from yardstick.host.tools import Tool, find_tool
from yardstick.settings.profiles import get_profile
from yardstick.tasks.base import RunContext, Skipped
from yardstick.tasks.memory import MemoryProfile, MemoryShape, memory_by_difference
from yardstick.tasks.memtier import MemtierProfile, memtier_args
from yardstick.tasks.throughput import (
    ThroughputProfile,
    benchmark_args,
    cluster_primaries,
    parse_benchmark_csv,
    throughput,
)

SETTING = "slowlog-log-slower-than"
THRESHOLD = "12345"  # distinctive: "set back" cannot be confused with a default
# Someone else's keys over every shard, some named close to what the tool or a benchmark
# writes: every one must outlive every test.
USER_KEYS = [f"user:{i}" for i in range(60)] + [
    "key:foo",
    "key:__rand_int__",
    "mylist",
    "myset:a:b",
    "counter:1",
    "yardstick-not-the-tools",
]

CONFIG_CHILD = """
import os, sys
from yardstick.access.environment import Environment
from yardstick.access.connect import open_client
from yardstick.access.scratch import build_strings, config_changes, fixture_keys
env = Environment.model_validate_json(sys.argv[1])
client = open_client(env, "child")
with fixture_keys(client, env) as prefix:
    build_strings(client, f"{prefix}str:", 25)
    with config_changes(client, env, {"slowlog-log-slower-than": 0}):
        os._exit(9)
"""
BENCHMARK_CHILD = """
import json, os, sys
from yardstick.access.benchdb import claimed_nodes
from yardstick.access.environment import Environment
from yardstick.host.tools import find_tool, run_tool
nodes = [Environment.model_validate(n) for n in json.loads(sys.argv[1])]
tool = find_tool("redis-benchmark")
with claimed_nodes(nodes, "throughput"):
    run_tool([tool.path, "--cluster", "-h", "127.0.0.1", "-p", sys.argv[2], "-n", "600",
              "-c", "12", "-t", "set,lpush,sadd,hset,incr", "-q"], timeout_s=60)
    os._exit(9)
"""


def killed_child(code: str, *args: str) -> int:
    """Run `code` in a child Python that dies inside its block (exit 9, no cleanup)."""
    process = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert process.returncode == 9, process.stderr[-2000:]
    return 9


def cluster_benchmark() -> Tool:
    """redis-benchmark with --cluster (6.0+), else the test skips saying why."""
    if why := missing_tool("redis-benchmark"):
        pytest.skip(why)
    tool = find_tool("redis-benchmark")
    if tool.version < (6, 0, 0):
        pytest.skip(f"redis-benchmark {tool.version_text} has no --cluster")
    return tool


@pytest.fixture(scope="module")
def cluster(newest_binary) -> Cluster:
    """Three primaries without replicas, the other keys loaded, a distinctive threshold."""
    with running(start_cluster, newest_binary, primaries=3, replicas_each=0) as shape:
        for port in shape.primaries:
            client(port).config_set(SETTING, THRESHOLD)
        rc = shape.cluster_client()
        try:
            for key in USER_KEYS:
                rc.set(key, "not the tool's")
        finally:
            rc.close()
        yield shape


@pytest.fixture
def shape(cluster: Cluster) -> Shape:
    """The cluster as the tool discovers it; after each test its other keys are all there,
    nothing of the tool's is left, every threshold is as found."""
    found = discover(Environment(name="shop", url=cluster.seed.url, mode="scratch"))
    yield found
    for port in cluster.primaries:
        node = client(port)
        assert [k for k in node.scan_iter(count=1000) if k not in USER_KEYS] == []
        assert node.config_get(SETTING)[SETTING] == THRESHOLD
    rc = cluster.cluster_client()
    try:
        assert all(rc.get(key) == "not the tool's" for key in USER_KEYS)
    finally:
        rc.close()


def primaries(shape: Shape) -> list[Environment]:
    """The primary members, as measured."""
    return [unit for unit in units_of(shape)[1:] if unit.node_role == "primary"]


def node_client(env: Environment) -> redis.Redis:
    """A plain client of a member's node (not cluster-aware: a MOVED would raise)."""
    return redis.Redis.from_url(env.url, decode_responses=True, protocol=2)


def serves(env: Environment, key: str) -> bool:
    """Whether `key`'s slot is served by the member's node now (CLUSTER SLOTS)."""
    slot = key_slot(key.encode())
    with node_client(env) as c:
        for start, end, owner, *_ in c.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(owner[1]) == env.port
    return False


# --- fixture keys and CONFIG intents route to the node -----------------------------------------


def test_fixture_keys_and_intents_carry_the_nodes_tag(shape):
    for env in primaries(shape):
        assert env.key_tag and serves(env, env.key_tag)
        with node_client(env) as c:
            with scratch.fixture_keys(c, env) as prefix:
                assert prefix == f"yardstick:fixture:{env.key_tag}:"
                scratch.build_list(c, f"{prefix}list", 2000)
                scratch.build_hash(c, f"{prefix}hash", 500)
                scratch.build_strings(c, f"{prefix}str:", 1500)  # MSET: one slot per batch
                assert c.llen(f"{prefix}list") == 2000
                with scratch.config_changes(c, env, {SETTING: 0}):
                    intents = scratch.intent_key(env)
                    assert intents == f"yardstick:intent:{env.key_tag}:config"
                    assert serves(env, intents) and c.hexists(intents, SETTING)
                    assert c.config_get(SETTING)[SETTING] == "0"
                assert not c.exists(intents)
    # Standalone names are unchanged.
    plain = Environment(name="s", url="redis://127.0.0.1:1/0", mode="scratch")
    assert scratch.fixture_prefix(plain) == scratch.FIXTURE_PREFIX
    assert scratch.intent_key(plain) == scratch.INTENT_KEY


def test_a_killed_experiment_is_undone_by_the_next_cleanup(shape, cluster):
    exp = next(env for env in primaries(shape) if env.runs_experiments)
    killed_child(CONFIG_CHILD, exp.model_dump_json())
    with node_client(exp) as c:
        assert c.config_get(SETTING)[SETTING] == "0"  # died with the setting changed
        assert c.exists(scratch.intent_key(exp))
        # One more fixture key under another tag of the same node (slots it still serves):
        # cleanup removes every fixture key the node holds, one DEL per slot.
        other = next(
            f"{{yst{i}}}"
            for i in range(1, 100_000)
            if f"{{yst{i}}}" != exp.key_tag and serves(exp, f"{{yst{i}}}")
        )
        c.set(f"yardstick:fixture:{other}:old", 1)
    step = cleanup_step(exp, get_profile("quick"))
    assert step["status"] == "ok", step
    assert f"set {SETTING} back to {THRESHOLD}" in step["reason"]
    assert "removed 26 fixture keys" in step["reason"]
    # The other primaries had nothing left: their cleanup says so, and sends no SELECT.
    for env in primaries(shape):
        if env is not exp:
            assert cleanup_step(env, get_profile("quick"))["reason"] == (
                "nothing left by earlier runs"
            )


# --- throughput on the cluster as a whole ------------------------------------------------------


def test_cluster_throughput_runs_redis_benchmark_cluster_and_leaves_none_of_its_keys(shape):
    cluster_benchmark()
    whole = units_of(shape)[0]
    nodes = cluster_primaries(whole, RunContext(shape=shape))
    assert sorted(n.port for n in nodes) == sorted(n.port for n in primaries(shape))
    profile = ThroughputProfile(
        clients=[1, 12],
        pipelines=[1, 4],
        payloads_bytes=[3],
        tests=["set", "get", "lpush", "sadd", "hset", "zadd", "incr"],
        requests=300,
        repetitions=1,
    )
    measured = throughput(whole, profile, nodes)
    rows = measured.tables["benchmark"].to_pylist()
    assert measured.problems == [] and len(rows) == 4 * 7
    assert all(r["status"] == "ok" and r["rps"] > 0 for r in rows)
    assert {r["test"] for r in rows} == {"SET", "GET", "LPUSH", "SADD", "HSET", "ZADD", "INCR"}
    # The shape fixture asserts no benchmark key and no claim is left on any primary.


def test_a_password_protected_cluster_gets_its_per_run_user_on_every_primary(
    shape, cluster, monkeypatch
):
    cluster_benchmark()
    password = "cluster-secret-6d1f"
    monkeypatch.setenv("YST_CLUSTER_PW", password)
    for port in cluster.primaries:
        client(port).config_set("requirepass", password)
    try:
        env = Environment(
            name="shop", url=cluster.seed.url, mode="scratch", password_env="YST_CLUSTER_PW"
        )
        found = discover(env)
        whole = units_of(found)[0]
        nodes = cluster_primaries(whole, RunContext(shape=found))
        assert nodes and all(n.password_env == "YST_CLUSTER_PW" for n in nodes)
        profile = ThroughputProfile(
            clients=[12], pipelines=[1], payloads_bytes=[3], tests=["set"], requests=300,
            repetitions=1,
        )  # fmt: skip
        measured = throughput(whole, profile, nodes)
        rows = measured.tables["benchmark"].to_pylist()
        assert measured.problems == [] and [r["status"] for r in rows] == ["ok"]
        for port in cluster.primaries:
            users = client(port, password=password).execute_command("ACL", "USERS")
            assert [u for u in users if u.startswith("yardstick-bench-")] == []
    finally:
        for port in cluster.primaries:
            client(port, password=password).config_set("requirepass", "")


def test_a_killed_cluster_benchmark_is_removed_by_the_next_cleanup(shape, cluster):
    cluster_benchmark()
    nodes = primaries(shape)
    killed_child(
        BENCHMARK_CHILD,
        json.dumps([n.model_dump(mode="json") for n in nodes]),
        str(cluster.seed.port),
    )
    left = {}
    for env in nodes:
        with node_client(env) as c:
            assert c.exists(benchdb.claim_key(env))
            left[env.port] = len(benchdb.cluster_load_keys(c))
    assert sum(1 for n in left.values() if n) >= 2, left  # the load reached several shards
    profile = get_profile("quick")
    for env in nodes:
        step = cleanup_step(env, profile)
        assert step["status"] == "ok", step
        assert (
            f"removed {left[env.port]} benchmark key" in step["reason"]
            and "by an interrupted throughput run (claimed " in step["reason"]
        ), step["reason"]


def test_benchmark_named_keys_without_a_claim_are_refused_and_kept(shape, cluster):
    nodes = primaries(shape)
    stray = f"key:{nodes[1].key_tag}:__rand_int__"  # a manual redis-benchmark run's
    with node_client(nodes[1]) as c:
        c.set(stray, "x")
        try:
            with pytest.raises(benchdb.ForeignKeys, match="named like a benchmark's"):
                with benchdb.claimed_nodes(nodes, "throughput"):
                    pytest.fail("never reached")
            assert c.get(stray) == "x"
            for node in nodes:
                with node_client(node) as other:
                    assert not other.exists(benchdb.claim_key(node))
            assert benchdb.recover_node(nodes[1]) == []  # no claim: left alone
            assert c.get(stray) == "x"
        finally:
            c.delete(stray)


# --- memory on a cluster primary ---------------------------------------------------------------


def test_memory_measures_beside_the_nodes_keys_and_says_so(shape):
    env = primaries(shape)[0]
    with node_client(env) as c:
        others = c.dbsize()
    profile = MemoryProfile(
        shapes=[MemoryShape(name="string", type="string", key_count=2000)],
        usage_sample_keys=10,
    )
    measured = memory_by_difference(env, profile)
    assert measured.problems == []
    assert measured.notes == [
        f"measured in database 0 (a cluster node has no other) beside {others} keys the tool "
        "did not write, left untouched: the difference holds while nothing else writes to "
        "this node; 3 of 3 repetitions saw exactly the tool's keys come and go (DBSIZE)"
    ]
    readings = measured.tables["memory_readings"].to_pylist()
    before = [r["dbsize"] for r in readings if r["phase"] == "before"]
    after = [r["dbsize"] for r in readings if r["phase"] == "after"]
    assert before == [others] * 3 and after == [others + 2000] * 3
    samples = measured.tables["memory_usage_samples"].to_pylist()
    assert samples and all(s["key"].startswith(f"yardstick:mem:{env.key_tag}:") for s in samples)
    assert all(s["memory_usage_bytes"] > 0 for s in samples)


# --- command lines (no server) -----------------------------------------------------------------


def test_cluster_command_lines_select_no_database(tmp_path):
    seed = Environment(name="shop", url="redis://127.0.0.1:7101/0", mode="scratch", cluster=True)
    plain = Environment(name="s", url="redis://127.0.0.1:6379/0", mode="scratch")
    bench = Tool(name="redis-benchmark", path="/x/redis-benchmark", version=(7, 0, 15))
    on_cluster = benchmark_args(bench, seed, 15, 50, 16, 3, 100, ["set"], cluster=True)
    assert "--cluster" in on_cluster and "--dbnum" not in on_cluster
    assert on_cluster[1:5] == ["-h", "127.0.0.1", "-p", "7101"]
    standalone = benchmark_args(bench, plain, 15, 50, 16, 3, 100, ["set"])
    assert "--cluster" not in standalone and standalone[5:7] == ["--dbnum", "15"]
    memtier = Tool(name="memtier_benchmark", path="/x/memtier_benchmark", version=(2, 1, 0))
    args = memtier_args(memtier, seed, MemtierProfile(), tmp_path / "o.json", cluster=True)
    assert "--cluster-mode" in args and f"--key-prefix={benchdb.MEMTIER_CLUSTER_PREFIX}" in args
    assert not any(a.startswith("--select-db") for a in args)
    alone = memtier_args(memtier, plain, MemtierProfile(), tmp_path / "o.json")
    assert "--select-db=15" in alone and "--cluster-mode" not in alone
    assert not any(a.startswith("--key-prefix") for a in alone)


def test_the_cluster_preamble_is_not_a_csv_row():
    text = (
        "Cluster has 3 master nodes:\n\n"
        "Master 0: 62389418f28526335bf9fa70423a7033c84b8b31 127.0.0.1:7103\n"
        "Master 1: f55f27eb99956d0b78661fd57dd17749e5044e05 127.0.0.1:7101\n\n"
        '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
        '"p99_latency_ms","max_latency_ms"\n'
        '"SET","396.83","0.031","0.016","0.031","0.039","0.079","0.199"\n'
    )
    assert parse_benchmark_csv(text) == [
        {
            "test": "SET",
            "rps": 396.83,
            "avg_ms": 0.031,
            "min_ms": 0.016,
            "p50_ms": 0.031,
            "p95_ms": 0.039,
            "p99_ms": 0.079,
            "max_ms": 0.199,
        }
    ]


def test_only_a_loads_own_key_names_are_the_loads():
    for key in (
        "key:{06S}:__rand_int__",
        "key:{8M}}:__rand_int__",
        "counter:{63n}:000000001234",
        "mylist:{63n}",
        "myzset:{n_{}",
        "yardstick:memtier:42",
    ):
        assert benchdb.CLUSTER_LOAD_KEY_RE.fullmatch(key), key
    for key in USER_KEYS + ["key:{06S}", "mylist:{06S}:x", "yardstick:memtier:x"]:
        assert not benchdb.CLUSTER_LOAD_KEY_RE.fullmatch(key), key


def test_a_node_serving_no_slot_is_left_alone(shape):
    # Discovery may see a node as a primary without slots (a replica not yet flagged so in
    # the seed's view, a primary whose slots all moved away): no key command is sent to it.
    env = primaries(shape)[0].model_copy(update={"key_tag": None})
    step = cleanup_step(env, get_profile("quick"))
    assert step["status"] == "ok" and "serves no hash slot" in step["reason"]
    with pytest.raises(Skipped, match="serves no hash slot"):
        memory_by_difference(env, MemoryProfile())
