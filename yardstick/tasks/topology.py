"""Topology: what the environment is made of at this run (cluster state and slots, each node's
role, health and slots, a Sentinel's view), and each replica's lag behind its primary, read
from every node at one instant. Reads only; part of every run and every collection."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pyarrow as pa
import redis

from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.info import parse_info
from yardstick.access.topology import Node, Shape, at, own_slot_moves, units_of
from yardstick.tasks.base import UTC_TS, Family, Measured, Skipped, utc_now

# A node that does not answer INFO within this is recorded as such; the others are read.
NODE_TIMEOUT_S = 3.0

TABLES: dict[str, pa.Schema] = {
    # One row per run: the shape and, for a cluster, CLUSTER INFO; for a Sentinel master,
    # what the Sentinel that answered says of it.
    "topology": pa.schema(
        [
            ("shape", pa.string()),  # standalone | cluster | sentinel
            ("sampled_at", UTC_TS),
            ("cluster_state", pa.string()),  # ok | fail
            ("slots_assigned", pa.int32()),
            ("slots_ok", pa.int32()),
            ("slots_pfail", pa.int32()),
            ("slots_fail", pa.int32()),
            ("known_nodes", pa.int32()),
            ("cluster_size", pa.int32()),  # primaries serving at least one slot
            ("current_epoch", pa.int64()),
            ("primaries", pa.int32()),
            ("replicas", pa.int32()),
            ("nodes_down", pa.int32()),  # not healthy, or not answering INFO now
            ("migrating_slots", pa.int32()),  # a resharding in progress
            ("importing_slots", pa.int32()),
            ("sentinel_master", pa.string()),
            ("sentinel_master_address", pa.string()),
            ("sentinel_flags", pa.string()),
            ("sentinel_quorum", pa.int32()),
            ("sentinel_other_sentinels", pa.int32()),
            ("sentinel_replicas", pa.int32()),
            ("sentinels_configured", pa.int32()),
            ("sentinel_answered_by", pa.string()),
            ("sentinel_failover_state", pa.string()),
            ("problems", pa.string()),  # seeds or Sentinels that did not answer
            # The environment's lag thresholds at this run (settings replica_lag_max_*): a
            # replica beyond either is flagged.
            ("replica_lag_max_bytes", pa.int64()),
            ("replica_lag_max_s", pa.float64()),
        ]
    ),
    # One row per server per run: role, slots, health, and replication offsets read at one
    # instant on every node (a replica's lag in bytes is its primary's offset minus its own).
    "topology_nodes": pa.schema(
        [
            ("member", pa.string()),  # the name the node's own tables land under
            ("address", pa.string()),
            ("node_id", pa.string()),
            ("role", pa.string()),  # primary | replica
            ("primary_address", pa.string()),
            ("shard", pa.string()),  # the primary's address: a primary and its replicas
            ("slots", pa.int32()),
            ("slot_ranges", pa.string()),
            ("flags", pa.string()),
            ("link_state", pa.string()),
            ("config_epoch", pa.int64()),
            ("health", pa.string()),  # online | failed | pfail | loading | unreachable ...
            # Slots this node itself says it is moving ([slot->-id] / [slot-<-id] on its own
            # CLUSTER NODES line, read on every node; else as the configured node saw it).
            ("migrating_slots", pa.int32()),
            ("importing_slots", pa.int32()),
            ("sampled_at", UTC_TS),
            ("repl_offset", pa.int64()),
            # The primary's offset minus the replica's own; when the replica does not answer
            # (frozen, busy), minus the offset the primary last had acknowledged by it.
            ("lag_bytes", pa.int64()),
            ("lag_s", pa.float64()),  # the primary's view: seconds since the replica's last ack
            ("master_link_status", pa.string()),  # a replica's: up | down
            ("master_last_io_s", pa.int64()),
            ("connected_replicas", pa.int32()),
            ("problem", pa.string()),
        ]
    ),
}


def _int(value: str | None) -> int | None:
    """An INFO number, or None."""
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def read_replication(env: Environment, node: Node) -> tuple[dict[str, str], datetime, str | None]:
    """INFO replication of one node (its own connection, short timeout), or why not; on a
    cluster node also the slots it says it is migrating or importing (`own_migrating`,
    `own_importing`: only a node's own CLUSTER NODES line shows them)."""
    sampled_at = utc_now()
    try:
        client = open_client(
            at(env, node.host, node.port, db=0 if env.cluster else None),
            "topology",
            command_timeout_s=NODE_TIMEOUT_S,
        )
        try:
            sampled_at = utc_now()
            text = client.execute_command("INFO", "replication")
            own = _own_slot_moves(client) if env.cluster else {}
        finally:
            client.close()
    except Exception as exc:
        return (
            {},
            sampled_at,
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
        )
    return {**parse_info(text).get("replication", {}), **own}, sampled_at, None


def _own_slot_moves(client: redis.Redis) -> dict[str, str]:
    """The slots this cluster node is migrating and importing, read on it (as INFO-like
    fields); {} where it cannot say, and the configured node's view stands in."""
    try:
        text = client.execute_command("CLUSTER", "NODES")
    except redis.RedisError:
        return {}
    moves = own_slot_moves(text.decode() if isinstance(text, bytes) else str(text))
    if moves is None:
        return {}
    return {"own_migrating": str(moves[0]), "own_importing": str(moves[1])}


def _primary_view(primary_info: dict[str, str], node: Node) -> dict[str, str]:
    """The primary's `slaveN:` entry for this replica (ip, port, state, offset, lag)."""
    for key, value in primary_info.items():
        if not (key.startswith("slave") and key[5:].isdigit()):
            continue
        facts = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        if facts.get("ip") == node.host and facts.get("port") == str(node.port):
            return facts
    return {}


def _replica_lag_s(primary_info: dict[str, str], node: Node) -> float | None:
    """The primary's `lag=` for this replica (seconds since its last REPLCONF ACK)."""
    lag = _primary_view(primary_info, node).get("lag", "")
    return float(lag) if lag.lstrip("-").isdigit() else None


def node_rows(shape: Shape, members: dict[str, str]) -> list[dict]:
    """Every node's row, INFO replication read on all of them at once (a node the cluster
    knows no address of is listed, not read)."""
    nodes = list(shape.nodes)

    def read(node: Node) -> tuple[dict[str, str], datetime, str | None]:
        if not (node.host and node.port):
            return {}, utc_now(), "no address known (CLUSTER NODES noaddr)"
        return read_replication(shape.env, node)

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(nodes)))) as pool:
        readings = list(pool.map(read, nodes))
    by_address = {node.address: reading for node, reading in zip(nodes, readings, strict=True)}
    rows = []
    for node, (info, sampled_at, problem) in zip(nodes, readings, strict=True):
        primary_info = by_address.get(node.primary_address or "", ({}, None, None))[0]
        offset = _int(info.get("master_repl_offset"))
        replica_offset = _int(info.get("slave_repl_offset"))
        primary_offset = _int(primary_info.get("master_repl_offset"))
        if node.role == "replica" and replica_offset is None:
            # A replica that does not answer still has an acknowledged offset at its primary.
            replica_offset = _int(_primary_view(primary_info, node).get("offset"))
        lag_bytes = (
            max(0, primary_offset - replica_offset)
            if node.role == "replica" and primary_offset is not None and replica_offset is not None
            else None
        )
        rows.append(
            {
                "member": members.get(node.address),
                "address": node.address,
                "node_id": node.node_id,
                "role": node.role,
                "primary_address": node.primary_address,
                "shard": node.address if node.role == "primary" else node.primary_address,
                "slots": node.slots,
                "slot_ranges": node.slot_text or None,
                "flags": node.flags or None,
                "link_state": node.link_state,
                "config_epoch": node.config_epoch,
                "health": (node.health or "unreachable")
                if problem and node.health not in (None, "online")
                else ("unreachable" if problem else (node.health or "online")),
                "migrating_slots": _int(info.get("own_migrating")) or node.migrating_slots,
                "importing_slots": _int(info.get("own_importing")) or node.importing_slots,
                "sampled_at": sampled_at,
                "repl_offset": replica_offset if node.role == "replica" else offset,
                "lag_bytes": lag_bytes,
                "lag_s": _replica_lag_s(primary_info, node) if node.role == "replica" else None,
                "master_link_status": info.get("master_link_status"),
                "master_last_io_s": _int(info.get("master_last_io_seconds_ago")),
                "connected_replicas": _int(info.get("connected_slaves")),
                "problem": problem,
            }
        )
    return rows


def shape_row(shape: Shape, nodes: list[dict]) -> dict:
    """The run's one topology row."""
    info, view = shape.cluster_info, shape.sentinel
    healthy = {"online", None}
    return {
        "shape": shape.kind,
        "sampled_at": utc_now(),
        "cluster_state": info.get("cluster_state"),
        "slots_assigned": _int(info.get("cluster_slots_assigned")),
        "slots_ok": _int(info.get("cluster_slots_ok")),
        "slots_pfail": _int(info.get("cluster_slots_pfail")),
        "slots_fail": _int(info.get("cluster_slots_fail")),
        "known_nodes": _int(info.get("cluster_known_nodes")),
        "cluster_size": _int(info.get("cluster_size")),
        "current_epoch": _int(info.get("cluster_current_epoch")),
        "primaries": sum(row["role"] == "primary" for row in nodes),
        "replicas": sum(row["role"] == "replica" for row in nodes),
        "nodes_down": sum(row["health"] not in healthy for row in nodes),
        "migrating_slots": sum(row["migrating_slots"] for row in nodes),
        "importing_slots": sum(row["importing_slots"] for row in nodes),
        "sentinel_master": view.get("master_name"),
        "sentinel_master_address": view.get("master_address"),
        "sentinel_flags": view.get("flags"),
        "sentinel_quorum": _int(view.get("quorum")),
        "sentinel_other_sentinels": _int(view.get("num_other_sentinels")),
        "sentinel_replicas": _int(view.get("num_slaves")),
        "sentinels_configured": _int(view.get("sentinels_configured")),
        "sentinel_answered_by": view.get("answered_by"),
        "sentinel_failover_state": view.get("failover_state") or None,
        "problems": "; ".join(shape.problems) or None,
        "replica_lag_max_bytes": shape.env.replica_lag_max_bytes,
        "replica_lag_max_s": shape.env.replica_lag_max_s,
    }


def record_topology(shape: Shape | None, members: dict[str, str]) -> Measured:
    """The shape found when the environment started, and every node's replication state now."""
    if shape is None:
        raise Skipped("no topology: the environment's shape was not discovered in this run")
    nodes = node_rows(shape, members)
    return Measured(
        tables={
            "topology": FAMILY.table("topology", [shape_row(shape, nodes)]),
            "topology_nodes": FAMILY.table("topology_nodes", nodes),
        }
    )


def _members(shape: Shape | None, env: Environment) -> dict[str, str]:
    """Node address -> the name its tables land under (the environment's own for the server
    it names, `<env>.<host>_<port>` for the others)."""
    if shape is None:
        return {}
    return {
        unit.address: unit.name for unit in units_of(shape) if unit.member_of or not unit.cluster
    }


FAMILY = Family(
    name="topology",
    # First, beside the fingerprint: the servers every figure of the run came from.
    phase="identity",
    scope="environment",
    measure=record_topology,
    retries=1,
    retry_delay_s=1.0,
    arguments=lambda env, profile, ctx: (ctx.shape, _members(ctx.shape, env)),
    tables=TABLES,
    collected=True,
)
