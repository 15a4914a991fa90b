"""Topology parsing on real CLUSTER NODES / SHARDS output, the hash tags that route the tool's
keys to one primary, how an environment splits into members, and the shape settings' checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from redis.crc import key_slot

from yardstick.access.environment import Environment
from yardstick.access.info import parse_info
from yardstick.access.topology import (
    Node,
    Shape,
    key_tag_for,
    parse_cluster_nodes,
    parse_cluster_shards,
    replicas_from_info,
    units_of,
)
from yardstick.settings.config import ConfigError, load_config
from yardstick.tasks.base import in_scope, unit_kind

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_cluster_nodes_roles_slots_and_primaries():
    nodes = parse_cluster_nodes(sample("cluster-nodes-redis-7.0.15.txt"))
    assert len(nodes) == 4
    primaries = [n for n in nodes if n.role == "primary"]
    replicas = [n for n in nodes if n.role == "replica"]
    assert len(primaries) == 3 and len(replicas) == 1
    # Every slot is served exactly once, by a primary.
    assert sum(n.slots for n in primaries) == 16384
    assert all(n.slots == 0 for n in replicas)
    # The replica names its primary by id and, resolved, by address.
    (replica,) = replicas
    primary = next(n for n in nodes if n.node_id == replica.primary_id)
    assert replica.primary_address == primary.address
    assert all(n.link_state == "connected" and n.health is None for n in nodes)


def test_migrating_and_importing_slots_are_counted_not_served():
    migrating = parse_cluster_nodes(sample("cluster-nodes-migrating-redis-7.0.15.txt"))
    importing = parse_cluster_nodes(sample("cluster-nodes-importing-redis-7.0.15.txt"))
    me = next(n for n in migrating if "myself" in n.flags)
    assert me.migrating_slots == 1 and me.importing_slots == 0
    assert me.slot_text == "0-5460"  # the bracketed entry is not a served range
    them = next(n for n in importing if "myself" in n.flags)
    assert them.importing_slots == 1 and them.migrating_slots == 0


def test_a_failed_node_is_named_by_flags_and_by_shards():
    nodes = parse_cluster_nodes(sample("cluster-nodes-fail-redis-7.0.15.txt"))
    failed = [n for n in nodes if n.health == "failed"]
    assert len(failed) == 1 and failed[0].link_state == "disconnected"
    health = parse_cluster_shards(json.loads(sample("cluster-shards-fail-redis-7.0.15.json")))
    assert health[failed[0].node_id] == "fail"
    assert sorted(v for k, v in health.items() if k != failed[0].node_id) == ["online"] * 3
    info = parse_info(sample("cluster-info-fail-redis-7.0.15.txt"))[""]
    assert info["cluster_state"] == "fail"
    assert int(info["cluster_slots_ok"]) + int(info["cluster_slots_fail"]) == 16384


@pytest.mark.parametrize("ranges", [((0, 5460),), ((5461, 10922),), ((16383, 16383),)])
def test_a_key_tag_routes_to_the_primary_s_slots(ranges):
    node = Node("127.0.0.1", 7000, "primary", slot_ranges=ranges)
    tag = key_tag_for(node)
    assert tag is not None and tag.startswith("{") and tag.endswith("}")
    # Any key holding the tag hashes to the tag's slot, one the node serves.
    assert node.serves(key_slot(f"yardstick:fixture:{tag}:list".encode()))
    assert key_tag_for(Node("127.0.0.1", 7001, "replica")) is None


def test_replicas_listed_by_a_primary():
    replication = {
        "role": "master",
        "connected_slaves": "2",
        "slave0": "ip=127.0.0.1,port=6380,state=online,offset=1200,lag=0",
        "slave1": "ip=10.0.0.2,port=6381,state=wait_bgsave,offset=0,lag=1",
    }
    me = Node("127.0.0.1", 6379, "primary")
    replicas = replicas_from_info(replication, me)
    assert [(r.address, r.health) for r in replicas] == [
        ("127.0.0.1:6380", "online"),
        ("10.0.0.2:6381", "wait_bgsave"),
    ]
    assert {r.primary_address for r in replicas} == {"127.0.0.1:6379"}


def test_a_cluster_splits_into_the_whole_and_one_member_per_node():
    env = Environment(name="shop", url="redis://127.0.0.1:7201/0", mode="scratch", cluster=True)
    nodes = parse_cluster_nodes(sample("cluster-nodes-redis-7.0.15.txt"))
    units = units_of(Shape(kind="cluster", env=env, nodes=tuple(nodes)))
    whole, members = units[0], units[1:]
    assert unit_kind(whole) == "cluster" and whole.name == "shop"
    assert sorted(m.name for m in members) == sorted(f"shop.127.0.0.1_{n.port}" for n in nodes)
    assert {m.member_of for m in members} == {"shop"}
    # Replicas are read-only whatever the environment's mode; primaries carry a key tag.
    for m in members:
        if m.node_role == "replica":
            assert m.mode == "read-only" and m.key_tag is None
        else:
            assert m.mode == "scratch" and m.key_tag is not None
    # The experiments run on one primary: the URL's node here.
    assert [m.address for m in members if m.runs_experiments] == ["127.0.0.1:7201"]
    experiment = next(m for m in members if m.runs_experiments)
    assert in_scope("experiment", experiment) and not in_scope("experiment", whole)
    assert in_scope("environment", whole) and not in_scope("node", whole)
    assert not any(in_scope("primary", m) for m in members if m.node_role == "replica")


def test_discover_false_keeps_one_server():
    env = Environment(name="solo", url="redis://127.0.0.1:6379/0", mode="read-only", discover=False)
    me = Node("127.0.0.1", 6379, "primary")
    replica = Node("127.0.0.1", 6380, "replica", primary_address=me.address)
    assert units_of(Shape(kind="standalone", env=env, nodes=(me, replica))) == [env]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "envs.yaml"
    path.write_text(text)
    return path


def test_a_sentinel_environment_needs_no_url(tmp_path):
    config = load_config(
        write(
            tmp_path,
            "environments:\n  - name: sessions\n    mode: read-only\n"
            "    sentinel: {master: mymaster, nodes: ['127.0.0.1:26379', '127.0.0.1:26380']}\n",
        )
    )
    (env,) = config.environments
    assert env.sentinel.master == "mymaster" and env.url.startswith("redis://")


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ("url: redis://127.0.0.1:6379/0\n    member_of: other", "member_of"),
        ("url: redis://127.0.0.1:6379/0\n    key_tag: '{x}'", "key_tag"),
        ("sentinel: {master: m, nodes: ['nohost']}", "sentinel.nodes"),
        ("url: redis://127.0.0.1:6379/0\n    seeds: ['127.0.0.1:x']", "seeds"),
        (
            "sentinel: {master: m, nodes: ['127.0.0.1:26379']}\n    seeds: ['127.0.0.1:7000']",
            "seeds",
        ),
    ],
)
def test_shape_settings_are_checked_with_one_line(tmp_path, entry, field):
    path = write(tmp_path, f"environments:\n  - name: e\n    mode: read-only\n    {entry}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message and "environment 'e'" in message and field in message, message


def test_a_nodes_own_slot_moves_are_read_from_its_myself_line():
    """Only a node's own CLUSTER NODES line shows `[slot->-id]` / `[slot-<-id]`."""
    from yardstick.access.topology import own_slot_moves

    text = (
        "aaa 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [42->-bbb]\n"
        "bbb 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922\n"
    )
    assert own_slot_moves(text) == (1, 0)
    other = text.replace("myself,master", "master").replace(
        "bbb 127.0.0.1:7002@17002 master", "bbb 127.0.0.1:7002@17002 myself,master"
    )
    assert own_slot_moves(other.replace("10922\n", "10922 [7-<-aaa]\n")) == (0, 1)
    assert own_slot_moves("") is None
