"""The SQL half of production shapes: a Redis Cluster landed as its environment and one member
environment per node (tests/lakes.py pieces plus topology rows), a Sentinel-managed master
whose address changes between two runs, and a lake from before the topology family, each
built into a real warehouse with dbt and read back: shard balance names the shard holding the
keys, the cluster's key total is its primaries' DBSIZE, replicas get lag and round trip
ratios, a failover is an environment change and never a regression, members live inside
their environment's report. No Redis: the rows are what the flows land."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lakes
import pytest
from typer.testing import CliRunner

from yardstick.app import cli
from yardstick.reports.render import render_reports
from yardstick.storage import dbt, delta, warehouse
from yardstick.storage.lakefs import Lake

FIRST = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
DAY_S = 86400
# address -> (role, its primary, keys in db0, used_memory, get calls per second, CPU share)
NODES = {
    "127.0.0.1:7101": ("primary", None, 0, 2_000_000, 10.0, 0.01),
    "127.0.0.1:7102": ("primary", None, 300, 2_600_000, 30.0, 0.02),
    "127.0.0.1:7103": ("primary", None, 0, 2_000_000, 20.0, 0.01),
    "127.0.0.1:7104": ("replica", "127.0.0.1:7101", 0, 1_900_000, 0.0, 0.005),
    "127.0.0.1:7105": ("replica", "127.0.0.1:7102", 300, 2_500_000, 0.0, 0.005),
    "127.0.0.1:7106": ("replica", "127.0.0.1:7103", 0, 1_900_000, 0.0, 0.005),
}
SLOTS = {
    "127.0.0.1:7101": "0-5460",
    "127.0.0.1:7102": "5461-10922",
    "127.0.0.1:7103": "10923-16383",
}


def member(address: str) -> str:
    """The member environment a node lands under (yardstick/access/topology.py member_name)."""
    host, port = address.split(":")
    return f"shop.{host}_{port}"


def _scan(run: lakes.Run, dbsize: int, used_memory: int) -> None:
    """A complete key space scan of `dbsize` keys `user:<n>` of 80 bytes each."""
    keys = [
        {
            "key": f"user:{n}",
            "prefix": "user:*",
            "type": "string",
            "encoding": "embstr",
            "elements": 1,
            "memory_usage_bytes": 80,
        }
        for n in range(dbsize)
    ]
    lakes.keyspace_scan(run, keys, used_memory)


LOST = "not attempted: server unreachable (ConnectionError: Connection refused)"


def _cluster_night(
    lake_dir: Path,
    night: int,
    rng: random.Random,
    no_counters: frozenset[str] = frozenset(),
    lost: frozenset[str] = frozenset(),
) -> str:
    """One nightly run of the cluster `shop`: each node as its member, then the environment
    with its topology (the second night: a resharding and a replica whose link is down);
    the nodes in `no_counters` take no commandstats snapshot that night, those in `lost`
    stop answering before their SLOWLOG is read."""
    at = FIRST + timedelta(days=night)
    run_id = lakes.stable_run_id(at, "shop")
    later = night > 0
    for address, (role, _primary, keys, used, ops, cpu) in NODES.items():
        run = lakes.new_run(lake_dir, member(address), at, run_id)
        lakes.runs_row(run, "nightly", mode="read-only", url=f"redis://{address}/0")
        families = {"fingerprint": None, "round_trip": lakes.digest("nightly", "rtt")}
        if address in lost:
            later_step = {"started_at": at + timedelta(seconds=5), "status": "skipped"}
            run.write(
                "steps",
                [{"family": f, "status": "ok", "started_at": at, "params_digest": d}
                 for f, d in families.items()]
                + [{**later_step, "family": "slowlog", "reason": LOST}],
            )  # fmt: skip
        else:
            lakes.steps(run, families)
        facts = {
            ("topology", "kind"): role,
            ("topology", "member_of"): "shop",
            ("topology", "node_role"): role,
            ("topology", "address"): address,
            ("server", "run_id"): f"srv-{address}",
            ("memory", "used_memory"): str(used),
            ("cpu", "used_cpu_sys"): str(100 + night * cpu * DAY_S / 2),
            ("cpu", "used_cpu_user"): str(50 + night * cpu * DAY_S / 2),
        }
        if keys:
            facts[("keyspace", "db0")] = f"keys={keys},expires=0,avg_ttl=0"
        lakes.fingerprint(run, facts=facts)
        # The replica of 7103 sits twice as far as its primary.
        lakes.ping(run, rtt_us=100.0 if address.endswith("7106") else 50.0, rng=rng)
        if address not in no_counters:
            lakes.commandstats_snapshot(
                run,
                {"get": 1000 + round(night * ops * DAY_S), "ping": 5000 + night * 10**6},
                server_run_id=f"srv-{address}",
            )
        if role == "primary":
            _scan(run, keys, used)
    run = lakes.new_run(lake_dir, "shop", at, run_id)
    lakes.runs_row(run, "nightly", mode="read-only", url="redis://127.0.0.1:7101/0")
    lakes.steps(run, {"fingerprint": None, "topology": None, "members": None})
    lakes.fingerprint(
        run, facts={("topology", "kind"): "cluster", ("topology", "address"): "127.0.0.1:7101"}
    )
    run.write(
        "topology",
        [
            {
                "shape": "cluster",
                "sampled_at": at,
                "cluster_state": "ok",
                "slots_assigned": 16384,
                "slots_ok": 16384,
                "slots_pfail": 0,
                "slots_fail": 0,
                "known_nodes": 6,
                "cluster_size": 3,
                "current_epoch": 6,
                "primaries": 3,
                "replicas": 3,
                "nodes_down": 0,
                "migrating_slots": 5 if later else 0,
                "importing_slots": 5 if later else 0,
            }
        ],
    )
    run.write(
        "topology_nodes",
        [
            {
                "member": member(address),
                "address": address,
                "node_id": f"id-{address}",
                "role": role,
                "primary_address": primary,
                "shard": primary or address,
                "slots": 5461 if role == "primary" else 0,
                "slot_ranges": SLOTS.get(address),
                "health": "online",
                "migrating_slots": 5 if later and address.endswith("7101") else 0,
                "importing_slots": 5 if later and address.endswith("7102") else 0,
                "sampled_at": at,
                "lag_bytes": (2048 if address.endswith("7105") else 0) if primary else None,
                "lag_s": (1.0 if address.endswith("7105") else 0.0) if primary else None,
                "master_link_status": (
                    ("down" if later and address.endswith("7106") else "up") if primary else None
                ),
            }
            for address, (role, primary, *_rest) in NODES.items()
        ],
    )
    return run_id


NIGHTS = 14
JUMP_FROM = 12  # the master's round trip grows 60 % from this night on


def _sentinel_nights(lake_dir: Path, env: str, rng: random.Random, failover: bool) -> None:
    """Nightly runs of a master whose round trip jumps on the last two nights; with
    `failover`, the Sentinels name another master on the last night, as after a failover.
    Without (no Sentinel at all), the same jump is a regression."""
    for night in range(NIGHTS):
        at = FIRST + timedelta(days=night)
        run = lakes.new_run(lake_dir, env, at, lakes.stable_run_id(at, env))
        lakes.runs_row(run, "nightly")
        lakes.steps(run, {"fingerprint": None, "round_trip": lakes.digest("nightly", "rtt")})
        facts = {("topology", "kind"): "server", ("topology", "address"): "127.0.0.1:6379"}
        if failover:
            address = "10.0.0.2:6379" if night == NIGHTS - 1 else "10.0.0.1:6379"
            facts[("topology", "sentinel_master")] = "mymaster"
            facts[("topology", "sentinel_master_address")] = address
            run.write(
                "topology",
                [
                    {
                        "shape": "sentinel",
                        "sampled_at": at,
                        "primaries": 1,
                        "replicas": 0,
                        "nodes_down": 0,
                        "sentinel_master": "mymaster",
                        "sentinel_master_address": address,
                        "sentinel_quorum": 2,
                    }
                ],
            )
        lakes.fingerprint(run, facts=facts)
        lakes.ping(run, rtt_us=80.0 if night >= JUMP_FROM else 50.0, rng=rng)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The cluster's two nights, a Sentinel master with a failover and a plain server with
    the same round trip history, in one warehouse."""
    root = tmp_path_factory.mktemp("topology")
    rng = random.Random(20261201)
    with delta.batch(
        Lake.at(root / "lake"), "topology nights"
    ):  # one commit per table, not per run
        for night in range(2):
            _cluster_night(root / "lake", night, rng)
        _sentinel_nights(root / "lake", "cache", rng, failover=True)
        _sentinel_nights(root / "lake", "plain", rng, failover=False)
    return warehouse.build(Lake.at(root / "lake"), root / "w.duckdb")


def _figures(path: Path, env: str, run_id: str | None = None) -> dict[tuple[str, str], float]:
    """(figure, subject) -> value for `env`'s latest full run (or `run_id`)."""
    rows = lakes.query(
        path,
        "select f.figure, f.subject, f.value from figures as f"
        " where f.env = ? and f.run_id = coalesce(?, (select max(run_id) from figures"
        " where env = ?))",
        [env, run_id, env],
    )
    return {(r["figure"], r["subject"]): r["value"] for r in rows}


def test_shard_balance_names_the_shard_holding_every_key(built):
    """All 300 keys on 7102's shard: its keys are 3× the mean of the three primaries, and
    it is the shard named largest; bytes, operations and CPU follow the same rule."""
    first = _figures(built, "shop", lakes.stable_run_id(FIRST, "shop"))
    assert first[("shard_keys_balance", "")] == pytest.approx(3.0)
    per_shard = {s: v for (f, s), v in first.items() if f == "shard_keys_over_mean"}
    assert max(per_shard, key=per_shard.get) == "127.0.0.1:7102"
    assert per_shard["127.0.0.1:7101"] == 0
    assert first[("shard_bytes_balance", "")] == pytest.approx(2_600_000 / 2_200_000)
    # Operations and CPU need an earlier snapshot or run of the same server: night two only.
    assert ("shard_ops_balance", "") not in first
    latest = _figures(built, "shop")
    assert latest[("shard_ops_balance", "")] == pytest.approx(1.5, rel=1e-3)
    assert latest[("shard_cpu_balance", "")] == pytest.approx(1.5, rel=1e-3)
    balance = lakes.query(
        built,
        "select dimension, largest_shard, largest_member from report_shard_balance"
        " where env = 'shop' and run_id = ?",
        [lakes.stable_run_id(FIRST + timedelta(days=1), "shop")],
    )
    assert {b["dimension"]: b["largest_shard"] for b in balance} == dict.fromkeys(
        ("keys", "bytes", "ops", "cpu"), "127.0.0.1:7102"
    )
    assert {b["largest_member"] for b in balance} == {"shop.127.0.0.1_7102"}


def test_the_clusters_key_total_is_the_sum_of_its_primaries_dbsize(built):
    """cluster_keys = Σ DBSIZE of the primaries' scans, and the per-prefix totals add up."""
    figures = _figures(built, "shop")
    dbsize = lakes.query(
        built,
        "select sum(dbsize_before) as n from keyspace_scan_costs where run_id = ?"
        " and env like 'shop.%'",
        [lakes.stable_run_id(FIRST + timedelta(days=1), "shop")],
    )[0]["n"]
    assert figures[("cluster_keys", "")] == dbsize == 300
    assert figures[("cluster_prefix_keys", "user:*")] == 300
    assert figures[("cluster_prefix_bytes", "user:*")] == 300 * 80


def test_replicas_get_lag_and_a_round_trip_ratio_to_their_primary(built):
    figures = _figures(built, "shop")
    assert figures[("replica_rtt_p50_over_primary", "127.0.0.1:7106")] == pytest.approx(2, rel=0.1)
    assert figures[("replica_rtt_p50_over_primary", "127.0.0.1:7104")] == pytest.approx(1, rel=0.1)
    assert figures[("replica_lag_bytes", "127.0.0.1:7105")] == 2048
    assert figures[("replica_lag_s", "127.0.0.1:7105")] == 1.0
    natures = dict(
        (r["figure"], r["nature"])
        for r in lakes.query(
            built, "select distinct figure, nature from figures where env = 'shop'"
        )
    )
    assert natures["replica_rtt_p50_over_primary"] == "ratio"
    assert natures["replica_lag_bytes"] == "absolute"
    assert natures["shard_keys_balance"] == "ratio"


def test_resharding_and_a_replica_not_syncing_are_named(built):
    latest = lakes.stable_run_id(FIRST + timedelta(days=1), "shop")
    row = lakes.query(
        built, "select * from report_topology where env = 'shop' and run_id = ?", [latest]
    )
    assert row[0]["resharding"] and row[0]["migrating_slots"] == 5
    assert row[0]["replicas_not_syncing"] == 1
    assert "127.0.0.1:7106 (link down)" in row[0]["replicas_not_syncing_named"]


def test_a_sentinel_failover_is_an_environment_change_never_a_regression(built):
    """The same round trip jump: a regression on the plain server, 'environment changed' on
    the master the Sentinels moved; the plain server's series know nothing of Sentinels."""
    env = {
        r["env"]: r
        for r in lakes.query(
            built,
            "select env, sentinel_failover, environment_changed, previous_master_address"
            " from run_environment where run_id in (select run_id from latest_full_runs)",
        )
    }
    assert env["cache"]["sentinel_failover"] and env["cache"]["environment_changed"]
    assert env["cache"]["previous_master_address"] == "10.0.0.1:6379"
    assert not env["plain"]["environment_changed"]
    assert not lakes.query(
        built, "select 1 from run_environment where env = 'plain' and environment_changed"
    )
    verdicts = {
        r["env"]: r
        for r in lakes.query(
            built,
            "select env, verdict from changes where figure = 'rtt_client_p50_us'",
        )
    }
    assert verdicts["plain"]["verdict"] == "regression"
    assert verdicts["cache"]["verdict"] == "environment changed"
    summary = {
        r["env"]: r for r in lakes.query(built, "select env, verdict, regressions from verdicts")
    }
    assert summary["cache"]["regressions"] == 0
    failovers = lakes.query(built, "select * from report_sentinel_failovers where env = 'cache'")
    assert [f["sentinel_master_address"] for f in failovers] == ["10.0.0.2:6379"]


def test_members_live_in_their_environments_report(built, tmp_path):
    out = tmp_path / "out"
    written = render_reports(built, out)
    assert written["shop"] == out / "shop.md"
    assert written[member("127.0.0.1:7101")] == out / "members" / "shop.127.0.0.1_7101.md"
    assert not (out / "shop.127.0.0.1_7101.md").exists()
    report = (out / "shop.md").read_text()
    # Its headline: its servers' round trips, lowest to highest, each named by its server.
    p50 = next(line for line in report.splitlines() if line.endswith(" | `rtt_client_p50_us` |"))
    assert ") to " in p50 and " servers | absolute" in p50 and "(shop.127.0.0.1_" in p50, p50
    assert "## Topology" in report
    assert "A resharding is in progress" in report
    assert "The largest shard by keys is 127.0.0.1:7102" in report
    assert "(members/shop.127.0.0.1_7106.md)" in report
    assert "not syncing" in report and "127.0.0.1:7106 (link down)" in report
    assert "The cluster holds 300 keys" in report
    index = (out / "index.md").read_text()
    comparison = (out / "comparison.md").read_text()
    for text in (index, comparison):
        assert "| shop " in text or "| shop (" in text
        assert "| shop.127.0.0.1_7101 |" not in text
    assert "shop.127.0.0.1_7101" not in comparison
    member_report = (out / "members" / "shop.127.0.0.1_7101.md").read_text()
    assert "A server of [shop](../shop.md)" in member_report
    assert "](../charts/" in member_report
    cache = (out / "cache.md").read_text()
    assert "Failover since the previous run" in cache


def test_trend_reads_a_member_and_a_cluster_figure(built):
    runner = CliRunner()
    for args in (
        ["--env", "shop", "--figure", "shard_keys_balance"],
        ["--env", "shop.127.0.0.1_7106", "--figure", "rtt_client_p50_us"],
        ["--env", "shop", "--figure", "replica_lag_bytes", "--subject", "127.0.0.1:7105"],
    ):
        result = runner.invoke(cli.app, ["trend", *args, "--warehouse", str(built)])
        assert result.exit_code == 0, result.output
        assert f"{args[3]}" in result.output and f"on {args[1]}" in result.output
        assert "no history" not in result.output


def test_a_lake_from_before_the_topology_family_still_builds(tmp_path):
    """No topology files at all: the tables are empty, typed, and the figures are there."""
    run = lakes.new_run(tmp_path / "lake", "old", FIRST)
    lakes.runs_row(run, "nightly")
    lakes.steps(run, ["round_trip"])
    lakes.fingerprint(run)
    lakes.ping(run, rtt_us=50.0, rng=random.Random(1))
    assert not (tmp_path / "lake" / "topology").exists()
    path = warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")
    assert lakes.query(path, "select count(*) as n from topology_runs")[0]["n"] == 0
    assert lakes.query(path, "select count(*) as n from environment_members")[0]["n"] == 0
    assert ("rtt_client_p50_us", "") in _figures(path, "old")
    facts = lakes.query(path, "select sentinel_master_address, member_of from env_facts")[0]
    assert facts == {"sentinel_master_address": None, "member_of": None}
    render_reports(path, tmp_path / "out")
    assert "## Topology" not in (tmp_path / "out" / "old.md").read_text()


def test_an_update_forms_cpu_and_operations_balance_from_the_night_before(tmp_path):
    """Night two loaded by an update, night one by the build before it: the CPU and
    commandstats differences reach back through the state tables, as in a full build."""
    rng = random.Random(7)
    _cluster_night(tmp_path / "lake", 0, rng)
    path = warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")
    assert ("shard_cpu_balance", "") not in _figures(path, "shop")
    _cluster_night(tmp_path / "lake", 1, rng)
    assert warehouse.update(Lake.at(tmp_path / "lake"), path).mode == "incremental"
    latest = _figures(path, "shop")
    assert latest[("shard_cpu_balance", "")] == pytest.approx(1.5, rel=1e-3)
    assert latest[("shard_ops_balance", "")] == pytest.approx(1.5, rel=1e-3)


def test_the_topology_models_pass_their_dbt_tests(built):
    result = dbt.run(
        built,
        [
            "test",
            "--select",
            "path:models/marts/topology path:models/staging/topology run_environment",
        ],
    )
    assert result.nodes and all(status in ("success", "pass") for _, status, _ in result.nodes)


def test_a_primary_whose_counter_window_is_not_the_others_is_left_out_of_the_balance(tmp_path):
    """7103 takes no commandstats snapshot on night 1: on night 2 its difference covers two
    days against one for the others. Commands per second are balanced over 7101 and 7102
    only, and 7103 is listed apart with its window; keys and bytes still count all three."""
    rng = random.Random(11)
    for night in range(3):
        no_counters = frozenset({"127.0.0.1:7103"}) if night == 1 else frozenset()
        _cluster_night(tmp_path / "lake", night, rng, no_counters)
    path = warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")
    last = lakes.stable_run_id(FIRST + timedelta(days=2), "shop")
    figures = _figures(path, "shop", last)
    ops = {s for (f, s) in figures if f == "shard_ops_over_mean"}
    assert ops == {"127.0.0.1:7101", "127.0.0.1:7102"}
    assert figures[("shard_ops_balance", "")] == pytest.approx(30 / 20, rel=1e-3)
    assert {s for (f, s) in figures if f == "shard_keys_over_mean"} == {
        "127.0.0.1:7101",
        "127.0.0.1:7102",
        "127.0.0.1:7103",
    }
    apart = lakes.query(
        path,
        "select shard, window_s, median_window_s from report_shard_windows"
        " where env = 'shop' and run_id = ? and dimension = 'ops' and not comparable",
        [last],
    )
    assert [a["shard"] for a in apart] == ["127.0.0.1:7103"]
    assert apart[0]["window_s"] == pytest.approx(2 * apart[0]["median_window_s"])
    render_reports(path, tmp_path / "out")
    report = (tmp_path / "out" / "shop.md").read_text()
    assert "Left out of the commands/s and CPU balance" in report
    assert "| ops | 127.0.0.1:7103 | 172,800 s | 86,400 s |" in report, report


def test_a_member_lost_during_the_run_is_not_online_at_its_end(tmp_path):
    """7106 answered the topology read (online) and stopped answering before its round trip:
    its health at the end of the run is unreachable, it counts as down, and the report names
    the family it was lost at."""
    _cluster_night(tmp_path / "lake", 0, random.Random(5), lost=frozenset({"127.0.0.1:7106"}))
    path = warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")
    nodes = {
        r["address"]: r
        for r in lakes.query(path, "select * from report_topology_nodes where env = 'shop'")
    }
    assert nodes["127.0.0.1:7106"]["health"] == "online"
    assert nodes["127.0.0.1:7106"]["health_at_end"] == "unreachable"
    assert nodes["127.0.0.1:7106"]["is_down"] and not nodes["127.0.0.1:7105"]["is_down"]
    (shape,) = lakes.query(path, "select * from report_topology where env = 'shop'")
    assert shape["nodes_down"] == 1
    assert "127.0.0.1:7106 (unreachable, lost during slowlog)" in shape["nodes_down_named"]
    render_reports(path, tmp_path / "out")
    report = (tmp_path / "out" / "shop.md").read_text()
    assert "**unreachable** (lost during slowlog)" in report
