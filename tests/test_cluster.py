"""A real Redis Cluster (3 primaries, 3 replicas on loopback), configured by one node's URL:
the nightly run measures every node as a member of the environment, never meets a
redirection, finds each node's own SLOWLOG entries, counts the key space across the primaries,
names an unbalanced shard, records a frozen node while the others complete, and sends a
read-only cluster nothing but reads."""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import duckdb
import pytest
from conftest import open_warehouse, run_nightly, write_config
from topologies import Cluster, client, lake_rows, running, shared_once, start_cluster

from yardstick.access.guard import READ_SUBCOMMANDS, ReadOnlyViolation, check_read_only

pytestmark = pytest.mark.e2e

ENV = "shop"
SPREAD_KEYS = 300  # over every shard
HOT_KEYS = 1500  # one hash tag: one slot, one shard
# What a cluster-unaware command meets: a redirection, a key set across slots, or SELECT.
REDIRECTED = re.compile(r"MOVED|MovedError|ASK\b|CROSSSLOT|CrossSlot|SELECT is not allowed")


def member(port: int) -> str:
    """The member environment a node's tables land under."""
    return f"{ENV}.127.0.0.1_{port}"


def load_keys(cluster: Cluster) -> dict:
    """Keys over every shard, and many more on one shard's slots (one hash tag routed to the
    second primary: not the experiments' node, the URL's); return what was loaded where."""
    hot = cluster.primaries[1]
    tag = next(f"{{hot{i}}}" for i in range(10_000) if cluster.primary_for(f"{{hot{i}}}") == hot)
    rc = cluster.cluster_client()
    try:
        pipe = rc.pipeline(transaction=False)
        for i in range(SPREAD_KEYS):
            pipe.set(f"spread:{i}", "v" * 16)
        pipe.execute()
        for start in range(0, HOT_KEYS, 500):  # one slot: MSET in one command each
            rc.mset({f"{tag}:key:{i}": "v" * 16 for i in range(start, start + 500)})
    finally:
        rc.close()
    return {
        "hot_port": hot,
        "tag": tag,
        "keys": SPREAD_KEYS + HOT_KEYS,
        "dbsize_loaded": {str(p): client(p).dbsize() for p in cluster.primaries},
    }


@pytest.fixture(scope="module")
def full_run(prefect_server, newest_binary, tmp_path_factory) -> dict:
    """One quick scratch nightly run of a cluster holding keys, shared by this module's tests
    across xdist workers: the run, its lake, warehouse and reports, and the cluster's facts
    read right after it (DBSIZE of each primary)."""

    def build(folder: Path) -> dict:
        with running(start_cluster, newest_binary) as cluster:
            loaded = load_keys(cluster)
            config = write_config(
                folder / "envs.yaml", [{"name": ENV, "url": cluster.seed.url, "mode": "scratch"}]
            )
            started = time.monotonic()
            state, summary = run_nightly(folder, config_path=str(config))
            wall_s = time.monotonic() - started
            return {
                **loaded,
                "folder": str(folder),
                "wall_s": wall_s,
                "completed": state.is_completed(),
                "message": state.message,
                "run_id": summary.run_id,
                "outcomes": {
                    o.env: [o.status, o.error]
                    for top in summary.outcomes
                    for o in top.with_members()
                },
                "primaries": cluster.primaries,
                "replicas": cluster.replicas,
                "primary_of": {str(k): v for k, v in cluster.primary_of.items()},
                "dbsize_after": {str(p): client(p).dbsize() for p in cluster.primaries},
            }

    return shared_once(tmp_path_factory, "cluster-full-run", build)


@pytest.fixture(scope="module")
def cluster(newest_binary) -> Cluster:
    """A cluster of this module's (worker's) own, for tests that change or watch it."""
    with running(start_cluster, newest_binary) as shape:
        yield shape


@pytest.fixture
def healthy(cluster: Cluster) -> Cluster:
    """The module's cluster, once every node agrees it is whole again."""
    cluster.wait_healthy()
    return cluster


def _nodes(run: dict) -> list[int]:
    return run["primaries"] + run["replicas"]


def test_a_slow_command_lands_in_its_own_nodes_slowlog(prefect_server, healthy, tmp_path):
    """DEBUG SLEEP on one primary: the collection finds it in that node's SLOWLOG
    (slowlog_entries under its member environment) and in no other node's."""
    from yardstick.flows.collect import collect

    slow = healthy.primaries[2]
    client(slow).execute_command("DEBUG", "SLEEP", "0.02")  # 20 ms, above the 10 ms default
    config = write_config(
        tmp_path / "envs.yaml", [{"name": ENV, "url": healthy.seed.url, "mode": "read-only"}]
    )
    state = collect(config_path=str(config), lake_dir=str(tmp_path / "lake"), return_state=True)
    assert state.is_completed(), state.message
    entries = lake_rows(tmp_path / "lake", "slowlog_entries", "command like 'debug%'")
    assert {e["env"] for e in entries} == {member(slow)}, [(e["env"], e["args"]) for e in entries]
    assert entries[0]["duration_us"] >= 20_000
    collected = {r["env"] for r in lake_rows(tmp_path / "lake", "slowlog_collections")}
    assert collected == {member(p) for p in healthy.primaries + healthy.replicas}


def test_frozen_replicas_fail_alone(prefect_server, healthy, tmp_path):
    """One replica stopped (SIGSTOP) before the run, another once the round trips began:
    both recorded failed with a reason, every other node measured ok, the environment
    partial, the run Failed (the CLI's exit 1)."""
    before, during = healthy.replicas[0], healthy.replicas[-1]
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": ENV,
                "url": healthy.seed.url,
                "mode": "read-only",
                "families": ["fingerprint", "topology", "round_trip", "counters"],
            }
        ],
    )
    stop = threading.Event()
    frozen_at: list[float] = []

    def freeze_once_round_trips_begin() -> None:
        """Freeze `during` when the first node's round trip starts (nodes are measured in
        address order within a phase: primaries, then replicas; `during` comes last)."""
        watcher = client(healthy.primaries[0], socket_timeout=2)
        while not stop.is_set():
            if any(c.get("name") == "yardstick-roundtrip" for c in watcher.client_list()):
                os.kill(healthy.by_port(during).pid, signal.SIGSTOP)
                frozen_at.append(time.monotonic())
                break
            time.sleep(0.02)
        watcher.close()

    thread = threading.Thread(target=freeze_once_round_trips_begin, daemon=True)
    try:
        with healthy.frozen(before):
            thread.start()
            state, summary = run_nightly(tmp_path, config_path=str(config))
    finally:
        stop.set()
        thread.join(10)
        os.kill(healthy.by_port(during).pid, signal.SIGCONT)
    assert frozen_at, "the run never started a round trip: the replica was not frozen mid-run"
    assert state.is_failed(), state.message
    outcomes = {o.env: o for top in summary.outcomes for o in top.with_members()}
    assert outcomes[ENV].status == "partial", outcomes[ENV]
    for port in (before, during):
        outcome = outcomes[member(port)]
        assert outcome.status in ("failed", "partial") and outcome.error, outcome
    others = [p for p in healthy.primaries + healthy.replicas if p not in (before, during)]
    assert {outcomes[member(p)].status for p in others} == {"ok"}, outcomes
    steps = lake_rows(tmp_path / "lake", "steps", "run_id = ?", [summary.run_id])
    by = {(s["env"], s["family"]): s for s in steps}
    first = [s for s in steps if s["env"] == member(before)]
    assert first and all(s["status"] != "ok" and s["reason"] for s in first), first
    trip = by[(member(during), "round_trip")]
    assert trip["status"] == "failed" and "Timeout" in trip["reason"], trip
    assert by[(member(during), "fingerprint")]["status"] == "ok"  # before it was frozen
    members = by[(ENV, "members")]
    assert members["status"] == "failed"
    assert member(before) in members["reason"] and member(during) in members["reason"]
    runs = {r["env"]: r["status"] for r in lake_rows(tmp_path / "lake", "runs")}
    assert runs[ENV] == "partial" and runs[member(before)] == "failed"


class Monitor(threading.Thread):
    """MONITOR on one node over a raw socket, until stopped: every command the node ran."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(b"MONITOR\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += self.sock.recv(1)
        assert reply == b"+OK\r\n", reply
        self.sock.settimeout(0.2)
        self.data = bytearray()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return
            self.data += chunk

    def commands(self) -> list[tuple[str, list[str]]]:
        """(client address, the first two words) of every command seen."""
        out = []
        for line in bytes(self.data).decode("latin-1").split("\r\n"):
            match = re.match(r"\+[\d.]+ \[\d+ ([^\]]+)\] (.*)", line)
            if match:
                words = re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(2))
                out.append((match.group(1), words[:2]))
        return out

    def stop(self) -> None:
        self.stopped.set()
        self.join(5)
        self.sock.close()


def _replication_links(port: int) -> set[str]:
    """Addresses of a node's replication connections (its replicas, its primary's link)."""
    return {c["addr"] for c in client(port).client_list() if set(c.get("flags", "")) & {"S", "M"}}


def _commandstats(port: int) -> dict[str, int]:
    """INFO commandstats of one node: command -> calls."""
    stats = client(port).info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def test_a_read_only_cluster_is_sent_only_reads(prefect_server, healthy, tmp_path):
    """Mode read-only, MONITOR on every node for a whole quick run: every command any node ran
    is on the read-only guard's allow-list (no SET, DEL, CONFIG SET, FLUSH*). MONITOR does not
    show administrative commands (CONFIG, SLOWLOG, DEBUG...): the nodes' commandstats, before
    and after, do; on Redis 6.2 they count CONFIG GET and SET as one `config`."""
    nodes = healthy.primaries + healthy.replicas
    links = {port: _replication_links(port) for port in nodes}
    before = {port: _commandstats(port) for port in nodes}
    keys = {port: client(port).dbsize() for port in healthy.primaries}
    monitors = [Monitor(port) for port in nodes]
    for m in monitors:
        m.start()
    config = write_config(
        tmp_path / "envs.yaml", [{"name": ENV, "url": healthy.seed.url, "mode": "read-only"}]
    )
    try:
        state, summary = run_nightly(tmp_path, config_path=str(config))
    finally:
        for m in monitors:
            m.stop()
    assert state.is_completed(), state.message
    seen, refused = 0, []
    for m in monitors:
        for address, words in m.commands():
            if address in links[m.port]:
                continue  # the primary's replication stream (its PINGs), not the tool's
            seen += 1
            try:
                check_read_only(tuple(words))
            except ReadOnlyViolation:
                refused.append((m.port, words))
    assert seen > 100, f"MONITOR saw only {seen} commands: is it attached?"
    assert not refused, refused[:20]
    # What MONITOR leaves out, from the counters (the test's own INFO and MONITOR excepted,
    # and the replication link's REPLCONF).
    own = {"info", "monitor", "replconf", "psync", "sync"}
    written = []
    for port in nodes:
        after = _commandstats(port)
        for name, calls in after.items():
            if calls <= before[port].get(name, 0) or name in own:
                continue
            words = tuple(name.upper().split("|"))
            if len(words) == 1 and words[0] in READ_SUBCOMMANDS:
                continue  # 6.2: a container's subcommands counted as one (see the docstring)
            try:
                check_read_only(words)
            except ReadOnlyViolation:
                written.append((port, name, calls - before[port].get(name, 0)))
    assert not written, written
    outcomes = [o for top in summary.outcomes for o in top.with_members()]
    assert {o.status for o in outcomes} == {"ok"}, outcomes
    assert len(outcomes) == 1 + len(nodes)
    assert keys == {port: client(port).dbsize() for port in healthy.primaries}


def test_a_nightly_run_measures_every_node(full_run):
    """A runs row for the environment and each of its 6 nodes; the fingerprint names 3
    primaries and 3 replicas; the round trip measured on every node."""
    lake = Path(full_run["folder"]) / "lake"
    runs = {r["env"]: r for r in lake_rows(lake, "runs", "run_id = ?", [full_run["run_id"]])}
    assert set(runs) == {ENV, *(member(p) for p in _nodes(full_run))}, sorted(runs)
    roles = {
        r["env"]: r["value"]
        for r in lake_rows(lake, "fingerprint", "section = 'topology' and key = 'node_role'")
    }
    assert sorted(roles[member(p)] for p in _nodes(full_run)) == ["primary"] * 3 + ["replica"] * 3
    assert all(roles[member(p)] == "primary" for p in full_run["primaries"])
    kinds = {
        r["env"]: r["value"]
        for r in lake_rows(lake, "fingerprint", "section = 'topology' and key = 'kind'")
    }
    assert kinds[ENV] == "cluster"
    trips = {
        r["env"]: (r["status"], r["reason"])
        for r in lake_rows(lake, "steps", "family = 'round_trip'")
    }
    for port in _nodes(full_run):
        assert trips.get(member(port), (None,))[0] == "ok", (port, trips.get(member(port)))
    # The whole cluster's own families ran on the environment, not on a node.
    parent_families = {r["family"] for r in lake_rows(lake, "steps", "env = ?", [ENV])}
    assert {"fingerprint", "topology", "members"} <= parent_families
    assert "round_trip" not in parent_families


def test_no_family_meets_a_redirection_and_the_run_completes(full_run):
    """No step of any node (nor the environment's) failed on MOVED, CROSSSLOT or SELECT: every
    family of a scratch run works on a cluster, and the run completes."""
    lake = Path(full_run["folder"]) / "lake"
    steps = lake_rows(lake, "steps", "run_id = ?", [full_run["run_id"]])
    redirected = [
        (s["env"], s["family"], s["reason"][:200])
        for s in steps
        if s["reason"] and REDIRECTED.search(s["reason"])
    ]
    assert not redirected, redirected
    failed = [(s["env"], s["family"], s["reason"]) for s in steps if s["status"] == "failed"]
    assert not failed, failed
    assert full_run["completed"], full_run["message"]
    assert {status for status, _error in full_run["outcomes"].values()} == {"ok"}


def test_the_environment_report_names_every_node(full_run):
    """reports-out/<env>.md names each of the 6 nodes (address or member name)."""
    report = (Path(full_run["folder"]) / "out" / f"{ENV}.md").read_text()
    missing = [
        port
        for port in _nodes(full_run)
        if f"127.0.0.1:{port}" not in report and member(port) not in report
    ]
    assert not missing, f"nodes not named in {ENV}.md: {missing}"


def test_the_key_space_total_is_the_primaries_dbsize(full_run):
    """The key-space scans of the primaries together count every key: the sum of the
    primaries' DBSIZE (and exactly the keys loaded: the run left none of its own)."""
    lake = Path(full_run["folder"]) / "lake"
    scans = {
        r["env"]: r for r in lake_rows(lake, "keyspace_scans", "run_id = ?", [full_run["run_id"]])
    }
    assert set(scans) == {member(p) for p in full_run["primaries"]}, sorted(scans)
    assert {s["stop_reason"] for s in scans.values()} == {"complete"}
    counted = {
        r["env"]: r["n"]
        for r in _query(
            lake,
            "keyspace_keys",
            "select env, count(*) as n from t where run_id = ? group by env",
            [full_run["run_id"]],
        )
    }
    dbsize = full_run["dbsize_after"]
    for port in full_run["primaries"]:
        assert counted.get(member(port), 0) == dbsize[str(port)], (port, counted, dbsize)
    assert sum(counted.values()) == sum(dbsize.values()) == full_run["keys"]
    # Every shard holds keys, the hot one most.
    hot = full_run["hot_port"]
    assert min(dbsize.values()) > 0
    assert max(dbsize, key=dbsize.get) == str(hot)


def test_shard_balance_names_the_hot_shard(full_run):
    """Keys loaded mostly onto one shard's slots: the figure shard_keys_balance (largest shard
    ÷ mean of the primaries, keys as each primary's fingerprint saw them) is well above 1,
    and report_shard_balance names that shard's primary as the largest."""
    con = open_warehouse(Path(full_run["folder"]) / "warehouse.duckdb")
    key = [full_run["run_id"], ENV]
    figure = con.execute(
        "select value, nature from figures where run_id = ? and env = ?"
        " and figure = 'shard_keys_balance'",
        key,
    ).fetchone()
    assert figure is not None, "no figure shard_keys_balance for the cluster"
    loaded = full_run["dbsize_loaded"]  # what the fingerprints saw, before any experiment
    expected = max(loaded.values()) / (sum(loaded.values()) / len(loaded))
    assert expected > 2.0
    assert figure == (pytest.approx(expected, rel=0.01), "ratio")
    largest = con.execute(
        "select largest_shard, largest_member, shards from report_shard_balance"
        " where run_id = ? and env = ? and dimension = 'keys'",
        key,
    ).fetchone()
    hot = full_run["hot_port"]
    assert largest == (f"127.0.0.1:{hot}", member(hot), 3)


def _query(lake: Path, table: str, sql: str, params=()) -> list[dict]:
    """`sql` over one lake table (as `t`), rows as dicts."""
    files = [str(f) for f in lake.glob(f"{table}/env=*/*/*.parquet")]
    if not files:
        return []
    con = duckdb.connect()
    con.execute(
        "create view t as select * from read_parquet("
        + repr(files)
        + ", hive_partitioning = true, union_by_name = true)"
    )
    result = con.execute(sql, list(params))
    columns = [c[0] for c in result.description]
    return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]
