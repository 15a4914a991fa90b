"""Fingerprint: the environment before the numbers (server INFO, config, prober host, transport)."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

import pyarrow as pa
import redis

import yardstick
from yardstick.access.connect import open_client
from yardstick.access.environment import Environment
from yardstick.access.info import parse_info, parse_modules
from yardstick.host.tools import tool_facts
from yardstick.tasks.base import Family, Measured, unit_kind

# The lake tables this family lands, as commented on each.
TABLES: dict[str, pa.Schema] = {
    # Environment facts, long format so every Redis version's INFO fits.
    "fingerprint": pa.schema(
        [("section", pa.string()), ("key", pa.string()), ("value", pa.string())]
    ),
}


# cpu: the server's CPU seconds, differenced between runs per node (shard balance);
# replication and cluster: the node's role and offsets, whether cluster mode is on.
# stats: evicted_keys, differenced between runs (a likely cause of a change: marts.change_causes).
INFO_SECTIONS = (
    "server",
    "memory",
    "persistence",
    "stats",
    "clients",
    "keyspace",
    "cpu",
    "replication",
    "cluster",
)
# The settings the seed reads before trusting any number.
CONFIG_KEYS = (
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "latency-monitor-threshold",
    "maxmemory",
    "maxmemory-policy",
    "save",
    "appendonly",
    "appendfsync",
    "io-threads",
    "hz",
)


def _cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux), else what platform reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def prober_facts() -> dict[str, str]:
    """Facts about the machine the prober runs on."""
    load_1m, load_5m, load_15m = os.getloadavg()
    return {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cores": str(os.cpu_count() or 0),
        "cpu_model": _cpu_model(),
        "load_1m": f"{load_1m:.2f}",
        "load_5m": f"{load_5m:.2f}",
        "load_15m": f"{load_15m:.2f}",
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "tool_version": yardstick.__version__,
    }


def server_product(server: dict[str, str]) -> dict[str, str]:
    """Which product the server is and its own version, from INFO server.

    Valkey answers `redis_version:7.2.4` (the Redis it is compatible with) beside
    `server_name:valkey` and `valkey_version:8.1.8`, and `server_mode` instead of
    `redis_mode`: the product's own version is the one that marks an upgrade."""
    name = (server.get("server_name") or "").strip().lower()
    if not name:
        name = next(
            (p for p in ("valkey", "dragonfly", "keydb") if f"{p}_version" in server), "redis"
        )
    version = server.get(f"{name}_version") or server.get("redis_version") or ""
    mode = server.get("redis_mode") or server.get("server_mode") or ""
    return {"name": name, "version": version, "mode": mode}


def _config_values(client: redis.Redis) -> dict[str, str]:
    """CONFIG GET of each seed setting, one key at a time (multi-key needs 7.0).

    A setting that cannot be read is recorded as 'unavailable: <server error>' (the report
    then says "unknown (CONFIG not permitted)", never a guess). Once the server refuses
    CONFIG itself (renamed away, or not in the user's ACL rules) the other settings are not
    asked: each ask would only add a refused call to its error counters."""
    values: dict[str, str] = {}
    refused: str | None = None
    for key in CONFIG_KEYS:
        if refused is not None:
            values[key] = refused
            continue
        try:
            values.update({k: str(v) for k, v in client.config_get(key).items()})
        except redis.exceptions.ResponseError as exc:
            # Managed services often rename or forbid CONFIG: say so instead of failing.
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            values[key] = f"unavailable: {reason}"
            if isinstance(exc, redis.exceptions.NoPermissionError) or "unknown command" in (
                reason.lower()
            ):
                refused = values[key]
    return values


def tls_facts(env: Environment) -> dict[str, str]:
    """What the TLS connection checks, without secrets: verify on/off, the CA file's name
    (not its folder), whether a client certificate is sent, the name checked. Nothing
    without rediss://."""
    if not env.uses_tls:
        return {}
    tls = env.tls
    return {
        "tls_verify": str(tls.verify if tls else True).lower(),
        # Empty: the system's CAs.
        "tls_ca_file": tls.ca_file.name if tls and tls.ca_file else "",
        "tls_client_cert": str(bool(tls and tls.cert_file)).lower(),
        "tls_server_name": (tls.server_name or "") if tls else "",
    }


def topology_facts(env: Environment) -> dict[str, str]:
    """What this server is in its environment (flows/units.py): server, cluster, primary or
    replica, whose member, its address; a Sentinel master's name and current address (a
    failover changes the address: an environment change, not a regression)."""
    facts = {
        "kind": unit_kind(env),
        "member_of": env.member_of or "",
        "node_role": env.node_role or "",
        "address": env.address,
        "key_tag": env.key_tag or "",
        "runs_experiments": str(env.runs_experiments).lower(),
    }
    if env.sentinel is not None:
        facts["sentinel_master"] = env.sentinel.master
        facts["sentinel_master_address"] = env.address
    return facts


def fingerprint(env: Environment, server_binary: dict[str, str] | None = None) -> Measured:
    """Record INFO sections, the server product and its version, its modules, CONFIG GET
    values, prober host facts, the wrapped tools and transport."""
    rows: list[dict] = []

    def add(section: str, values: dict[str, str]) -> None:
        rows.extend({"section": section, "key": k, "value": str(v)} for k, v in values.items())

    client = open_client(env, "fingerprint")
    try:
        for section in INFO_SECTIONS:
            for name, values in parse_info(client.info(section)).items():
                add(name or section, values)
                if (name or section) == "server":
                    add("product", server_product(values))
        # One row per loaded module, its name and ver (INFO modules repeats the key
        # `module`, so parse_info would keep only the last): a module's keys are a type of
        # their own in the key-space scan, and a module is part of what was measured.
        add("modules", parse_modules(client.info("modules")))
        add("config", _config_values(client))
    finally:
        client.close()
    add(
        "probe",
        {
            "mode": env.mode,
            "transport": env.transport_label,
            "prober_on_host": str(env.on_server_host).lower(),
            "url": env.url_redacted,
            "same_server_as": env.same_server_as or "",
            **tls_facts(env),
        },
    )
    add("topology", topology_facts(env))
    add("prober", prober_facts())
    # The wrapped C tools this prober would run: '7.0.15 /usr/bin/redis-benchmark',
    # 'not found' or 'unknown: <reason>' (a version is read only from a real version line).
    add("tools", tool_facts())
    if server_binary:
        add("embedded", server_binary)
    return Measured(tables={"fingerprint": FAMILY.table("fingerprint", rows)})


FAMILY = Family(
    name="fingerprint",
    # First: every figure needs the environment that produced it.
    phase="identity",
    scope="all",
    measure=fingerprint,
    retries=1,
    retry_delay_s=1.0,
    arguments=lambda env, profile, ctx: (env, ctx.server_binary),
    tables=TABLES,
)
