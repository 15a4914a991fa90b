"""What an environment is made of: a standalone server (and its replicas), a Redis Cluster's
nodes, or the master a Sentinel names (and its replicas). Reads only: INFO, CLUSTER NODES /
INFO / SHARDS and SENTINEL MASTER / REPLICAS, every one on the read-only guard's list."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.crc import key_slot

from yardstick.access.connect import CONNECT_TIMEOUT_S, NO_SETINFO, MissingSecret, open_client
from yardstick.access.environment import Environment, format_address, parse_address
from yardstick.access.guard import ReadOnlyConnection
from yardstick.access.info import parse_info

# Discovery must not hold a run on a frozen node: each answer is waited for this long.
DISCOVERY_TIMEOUT_S = 5.0
# Redis Cluster's hash slots.
SLOTS = 16384


class ShapeUnknown(Exception):
    """No server (or Sentinel) of the environment answered: nothing can be measured."""


@dataclass(frozen=True)
class Node:
    """One server of the environment, as the topology names it."""

    host: str
    port: int
    role: str  # primary | replica
    node_id: str | None = None  # cluster node id
    primary_id: str | None = None  # a cluster replica's primary (node id)
    primary_address: str | None = None  # a replica's primary, host:port
    slot_ranges: tuple[tuple[int, int], ...] = ()
    flags: str = ""  # CLUSTER NODES flags (myself,master / slave,fail? ...) or Sentinel's
    link_state: str | None = None  # cluster bus link: connected | disconnected
    config_epoch: int | None = None
    migrating_slots: int = 0
    importing_slots: int = 0
    # online | failed | loading (CLUSTER SHARDS), else read from the flags (fail, pfail)
    health: str | None = None

    @property
    def address(self) -> str:
        """`host:port` of the node."""
        return format_address(self.host, self.port)

    @property
    def slots(self) -> int:
        """How many hash slots the node serves."""
        return sum(end - start + 1 for start, end in self.slot_ranges)

    @property
    def slot_text(self) -> str:
        """The slot ranges as CLUSTER NODES writes them ("0-5460,10923")."""
        return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in self.slot_ranges)

    def serves(self, slot: int) -> bool:
        """Whether `slot` is one of the node's."""
        return any(start <= slot <= end for start, end in self.slot_ranges)


@dataclass(frozen=True)
class Shape:
    """The environment's servers at discovery time."""

    kind: str  # standalone | cluster | sentinel
    env: Environment  # the environment, its URL resolved (Sentinel: the current master)
    nodes: tuple[Node, ...] = ()
    # CLUSTER INFO fields (cluster_state, cluster_slots_ok, ...), as text.
    cluster_info: dict[str, str] = field(default_factory=dict)
    # What the Sentinels say of the master (Sentinel environments): quorum, flags, counts.
    sentinel: dict[str, str] = field(default_factory=dict)
    # What discovery could not read (a seed or Sentinel that did not answer), said in reports.
    problems: tuple[str, ...] = ()

    @property
    def primaries(self) -> list[Node]:
        """The nodes that serve data as primaries."""
        return [node for node in self.nodes if node.role == "primary"]


def node_url(env: Environment, host: str, port: int, db: int | None = None) -> str:
    """The environment's URL (scheme, user, database) pointed at another server."""
    parts = urlsplit(env.url)
    user = f"{parts.username}@" if parts.username else ""
    netloc = f"{user}{format_address(host, port)}"
    path = f"/{env.db if db is None else db}"
    return urlunsplit((parts.scheme, netloc, path, parts.query, ""))


def at(env: Environment, host: str, port: int, db: int | None = None) -> Environment:
    """The environment with its URL pointed at `host:port` (same credentials and TLS)."""
    return env.model_copy(update={"url": node_url(env, host, port, db)})


def key_tag_for(node: Node) -> str | None:
    """A hash tag ("{yst12}") whose slot the node serves: keys holding it route there."""
    if not node.slot_ranges:
        return None
    for index in range(SLOTS * 8):
        tag = f"yst{index}"
        if node.serves(key_slot(tag.encode())):
            return "{" + tag + "}"
    return None  # unreachable for any node with a slot: every slot is hit well before


def _pairs(reply: Iterable) -> dict[str, str]:
    """A flat [key, value, key, value ...] reply as a dict of text."""
    items = list(reply)
    return {str(k): _text(v) for k, v in zip(items[::2], items[1::2], strict=False)}


def _text(value: object) -> str:
    """A reply element as text (lists joined)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


def parse_cluster_nodes(text: str) -> list[Node]:
    """CLUSTER NODES output as nodes (a node without an address is kept, host empty)."""
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        node_id, address, flags, primary, _ping, _pong, epoch, link = fields[:8]
        hostport = address.split("@", 1)[0].split(",", 1)[0]
        host, _, port = hostport.rpartition(":")
        ranges, migrating, importing = [], 0, 0
        for slot in fields[8:]:
            if slot.startswith("["):
                if "->-" in slot:
                    migrating += 1
                elif "-<-" in slot:
                    importing += 1
                continue
            start, _, end = slot.partition("-")
            ranges.append((int(start), int(end or start)))
        flag_set = set(flags.split(","))
        health = "failed" if "fail" in flag_set else ("pfail" if "fail?" in flag_set else None)
        nodes.append(
            Node(
                host=host.strip("[]"),
                port=int(port) if port.isdigit() else 0,
                role="primary" if "master" in flag_set else "replica",
                node_id=node_id,
                primary_id=None if primary == "-" else primary,
                slot_ranges=tuple(sorted(ranges)),
                flags=flags,
                link_state=link,
                config_epoch=int(epoch) if epoch.isdigit() else None,
                migrating_slots=migrating,
                importing_slots=importing,
                health=health,
            )
        )
    by_id = {node.node_id: node for node in nodes}
    return [
        _replace(node, primary_address=by_id[node.primary_id].address)
        if node.primary_id in by_id
        else node
        for node in nodes
    ]


def own_slot_moves(text: str) -> tuple[int, int] | None:
    """(migrating, importing) slots of the node whose CLUSTER NODES `text` this is: only a
    node's own (`myself`) line shows the slots it moves. None without that line."""
    me = next((n for n in parse_cluster_nodes(text) if "myself" in n.flags.split(",")), None)
    return None if me is None else (me.migrating_slots, me.importing_slots)


def _replace(node: Node, **changes: object) -> Node:
    """A copy of `node` with some fields changed."""
    from dataclasses import replace

    return replace(node, **changes)


def parse_cluster_shards(reply: list) -> dict[str, str]:
    """CLUSTER SHARDS (7.0+) as node id -> health (online | failed | loading)."""
    health = {}
    for shard in reply or []:
        shard_fields = dict(zip(shard[::2], shard[1::2], strict=False))
        for entry in shard_fields.get("nodes", []):
            facts = _pairs(entry)
            if facts.get("id"):
                health[facts["id"]] = facts.get("health", "")
    return health


def replicas_from_info(replication: dict[str, str], primary: Node) -> list[Node]:
    """A primary's replicas as its INFO replication lists them (slaveN:ip=,port=,...)."""
    replicas = []
    for key, value in sorted(replication.items()):
        if not (key.startswith("slave") and key[5:].isdigit()):
            continue
        facts = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        if not facts.get("ip") or not facts.get("port", "").isdigit():
            continue
        replicas.append(
            Node(
                host=facts["ip"],
                port=int(facts["port"]),
                role="replica",
                primary_address=primary.address,
                health="online" if facts.get("state") == "online" else facts.get("state"),
            )
        )
    return replicas


def _info(env: Environment, role: str, sections: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """INFO sections of the environment's URL node (short timeout)."""
    client = open_client(env, role, command_timeout_s=DISCOVERY_TIMEOUT_S)
    try:
        # One section per INFO: several in one command is Redis 7.0+ ("syntax error" before).
        return parse_info("\r\n".join(client.execute_command("INFO", s) for s in sections))
    finally:
        client.close()


def _cluster(env: Environment) -> Shape:
    """A cluster as the node at env's URL sees it (CLUSTER NODES, INFO, SHARDS on 7.0+)."""
    client = open_client(env, "topology", command_timeout_s=DISCOVERY_TIMEOUT_S)
    try:
        nodes = parse_cluster_nodes(_text(client.execute_command("CLUSTER", "NODES")))
        info = parse_info(_text(client.execute_command("CLUSTER", "INFO"))).get("", {})
        try:
            health = parse_cluster_shards(client.execute_command("CLUSTER", "SHARDS"))
        except redis.ResponseError:  # before 7.0: the flags tell fail and pfail
            health = {}
    finally:
        client.close()
    nodes = [
        _replace(node, health=health.get(node.node_id) or node.health or "online")
        if node.host
        else _replace(node, health=node.health or "noaddr")
        for node in nodes
    ]
    nodes.sort(key=lambda n: (n.role != "primary", n.host, n.port))
    return Shape(
        kind="cluster",
        env=env.model_copy(update={"cluster": True}),
        nodes=tuple(nodes),
        cluster_info=info,
    )


def _standalone(env: Environment, info: dict[str, dict[str, str]]) -> Shape:
    """A standalone server and, when it is a primary, the replicas it lists."""
    replication = info.get("replication", {})
    if replication.get("role") == "slave":
        primary = format_address(
            replication.get("master_host", ""), int(replication.get("master_port") or 0)
        )
        me = Node(env.host, env.port, "replica", primary_address=primary)
        return Shape(kind="standalone", env=env, nodes=(me,))
    me = Node(env.host, env.port, "primary", health="online")
    return Shape(kind="standalone", env=env, nodes=(me, *replicas_from_info(replication, me)))


def sentinel_client(env: Environment, address: str) -> redis.Redis:
    """A guarded client of one Sentinel (its own password variable; never a write)."""
    import os

    settings = env.sentinel
    assert settings is not None
    password = None
    if settings.password_env:
        password = os.environ.get(settings.password_env)
        if password is None:
            raise MissingSecret(
                f"environment {env.name!r}: variable {settings.password_env} "
                "(sentinel.password_env) is not set"
            )
    host, port = parse_address(address)
    # The guard's connection class through a pool: redis.Redis takes no connection_class.
    pool = redis.ConnectionPool(
        connection_class=ReadOnlyConnection,
        host=host,
        port=port,
        username=settings.username,
        password=password,
        decode_responses=True,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=DISCOVERY_TIMEOUT_S,
        protocol=2,
        client_name="yardstick-topology",
        **NO_SETINFO,
    )
    return redis.Redis(connection_pool=pool)


def _sentinel(env: Environment) -> Shape:
    """Ask the Sentinels, in order, for the master and its replicas; the first answer wins."""
    settings = env.sentinel
    assert settings is not None
    problems = []
    for address in settings.nodes:
        try:
            client = sentinel_client(env, address)
            try:
                master = _pairs(client.execute_command("SENTINEL", "MASTER", settings.master))
                replicas = [
                    _pairs(r)
                    for r in client.execute_command("SENTINEL", "REPLICAS", settings.master)
                ]
            finally:
                client.close()
        except MissingSecret:
            raise
        except redis.RedisError as exc:
            problems.append(f"sentinel {address}: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        host, port = master.get("ip", ""), int(master.get("port") or 0)
        if not host or not port:
            problems.append(f"sentinel {address}: knows no address of {settings.master!r}")
            continue
        flags = master.get("flags", "")
        primary = Node(
            host, port, "primary", flags=flags, health="failed" if "down" in flags else "online"
        )
        nodes = [primary]
        for replica in replicas:
            r_flags = replica.get("flags", "")
            nodes.append(
                Node(
                    host=replica.get("ip", ""),
                    port=int(replica.get("port") or 0),
                    role="replica",
                    primary_address=primary.address,
                    flags=r_flags,
                    link_state=replica.get("master-link-status"),
                    health="failed" if "down" in r_flags else "online",
                )
            )
        view = {
            "answered_by": address,
            "master_name": settings.master,
            "master_address": primary.address,
            "flags": flags,
            "quorum": master.get("quorum", ""),
            "num_other_sentinels": master.get("num-other-sentinels", ""),
            "num_slaves": master.get("num-slaves", ""),
            "failover_state": master.get("failover-state", ""),
            "config_epoch": master.get("config-epoch", ""),
            "sentinels_configured": str(len(settings.nodes)),
        }
        return Shape(
            kind="sentinel",
            env=at(env, host, port),
            nodes=tuple(nodes),
            sentinel=view,
            problems=tuple(problems),
        )
    raise ShapeUnknown(
        f"environment {env.name!r}: no Sentinel answered for master {settings.master!r} "
        f"({'; '.join(problems)})"
    )


def discover(env: Environment) -> Shape:
    """What `env` is made of now; ShapeUnknown (or the connection's error) when nothing answers.

    A cluster's URL node that does not answer is replaced by the first seed that does."""
    if env.sentinel is not None:
        return _sentinel(env)
    candidates = [env] + [at(env, *parse_address(seed), db=0) for seed in env.seeds or []]
    problems: list[str] = []
    for index, candidate in enumerate(candidates):
        try:
            info = _info(candidate, "topology", ("server", "cluster", "replication"))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if index == len(candidates) - 1:
                raise
            problems.append(f"{candidate.address}: {type(exc).__name__}")
            continue
        if info.get("cluster", {}).get("cluster_enabled") == "1":
            shape = _cluster(candidate)
            return _with_problems(shape, problems)
        return _with_problems(_standalone(candidate, info), problems)
    raise AssertionError("unreachable")  # the last candidate returns or raises


def _with_problems(shape: Shape, problems: list[str]) -> Shape:
    """The shape, with what discovery could not read added."""
    from dataclasses import replace

    return replace(shape, problems=shape.problems + tuple(problems)) if problems else shape


def member_name(env_name: str, node: Node) -> str:
    """The name a node's own tables land under: `<env>.<host>_<port>` in the lake's alphabet."""
    host = re.sub(r"[^A-Za-z0-9_.-]+", "-", node.host).strip("-") or "node"
    return f"{env_name}.{host}_{node.port}"


def experiment_primary(shape: Shape) -> str | None:
    """The cluster primary the experiments run on: the configured one, else the URL's node
    when it is a primary, else the first primary by address."""
    primaries = [node for node in shape.primaries if node.host and node.slot_ranges]
    if shape.env.experiment_node:
        return shape.env.experiment_node
    for node in primaries:
        if node.address == shape.env.address:
            return node.address
    return primaries[0].address if primaries else None


def member(env: Environment, node: Node, experiments_on: str | None = None) -> Environment:
    """One node of `env` as an environment of its own (replicas always read-only: a replica
    refuses writes anyway, and the guard makes sure none is sent)."""
    return env.model_copy(
        update={
            "name": member_name(env.name, node),
            "url": node_url(env, node.host, node.port, db=0 if env.cluster else None),
            "mode": "read-only" if node.role == "replica" else env.mode,
            "member_of": env.name,
            "node_role": node.role,
            "key_tag": key_tag_for(node) if env.cluster and node.role == "primary" else None,
            "runs_experiments": node.address == experiments_on,
            "sentinel": None,
            "seeds": None,
            "same_server_as": None,
        }
    )


def units_of(shape: Shape) -> list[Environment]:
    """The environment as a whole first, then each node measured on its own."""
    env = shape.env
    if not env.discover:
        return [env]
    if shape.kind == "cluster":
        experiments_on = experiment_primary(shape)
        return [env] + [member(env, node, experiments_on) for node in shape.nodes if node.host]
    # Standalone or Sentinel: the environment is the primary (the URL's server, the master
    # Sentinel names); its replicas are the members.
    return [env] + [member(env, node) for node in shape.nodes[1:] if node.host and node.port]
