"""Likely causes (marts.change_causes) on a synthetic lake: a step planted beside a configuration
change, beside a slow command of the application, beside evictions, a Sentinel or a cluster
failover, replica lag, a quiet host's load, a new prefix, a type's share of the key bytes,
beside nothing; and what the verdict's readers (`yardstick changes`, the verdict event, the
report row) say of them."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import open_warehouse
from lakes import (
    Run,
    benchmark,
    cell,
    commandstats_snapshot,
    family_load,
    fingerprint,
    keyspace_scan,
    new_run,
    runs_row,
    slowlog_collection,
    steps,
)
from test_history import NIGHTLY, START
from typer.testing import CliRunner

from yardstick.app.cli import app
from yardstick.flows import announce
from yardstick.reports.render import render_reports
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake

NIGHTS, STEP = 24, 18  # a step on night 18: 18 nights of reference, 6 since
SPEEDUP = "pipeline_speedup", "set c1 3B"


def land_night(
    lake_dir: Path,
    env: str,
    day: int,
    speedup: float,
    appendfsync: str,
    slow_ids: list[int],
    facts: dict[tuple[str, str], str] | None = None,
    keys: list[dict] | None = None,
) -> Run:
    """One night of `env`: a 2-cell benchmark giving `speedup`, its fingerprint with
    `appendfsync` (and `facts`), a commandstats snapshot, a SLOWLOG read of `slow_ids` and
    the key-space scan's `keys`."""
    run = new_run(lake_dir, env, START + timedelta(days=day))
    steps(run, {"throughput": NIGHTLY})
    runs_row(run, "nightly", finished_at=run.at, url="redis://x:1/0")
    fingerprint(run, facts={("config", "appendfsync"): appendfsync, **(facts or {})})
    benchmark(run, [cell("SET", 1, p, v) for p, v in ((1, 1e5), (16, 1e5 * speedup))])
    commandstats_snapshot(run, {"set": 1000 * (day + 1), "get": 500 * (day + 1)}, uptime_s=day)
    slowlog_collection(run, slow_ids)
    if keys:
        run.write("keyspace_keys", keys)
    return run


def evictions(day: int, after: bool) -> dict[tuple[str, str], str]:
    """One server process's INFO: evicted_keys none before the step, 40,000 a night after."""
    return {
        ("server", "run_id"): "a" * 40,
        ("server", "uptime_in_seconds"): str(86400 * day + 60),
        ("stats", "evicted_keys"): str(40000 * max(day - STEP + 1, 0) if after else 0),
    }


def sentinel_master(after: bool) -> dict[tuple[str, str], str]:
    """The master the Sentinels name: another one from the step's night (a failover)."""
    return {("topology", "sentinel_master_address"): "10.0.0.2:6379" if after else "10.0.0.1:6379"}


def cluster_topology(run, after: bool, lag_bytes: int) -> None:
    """A primary and its replica, as the topology family lands them; `after`: swapped (a
    failover on the step's night, the same roles after it), the replica `lag_bytes` behind."""
    roles = {"127.0.0.1:7001": "primary", "127.0.0.1:7002": "replica"}
    if after:  # from the step's night the second is the primary
        roles = {"127.0.0.1:7001": "replica", "127.0.0.1:7002": "primary"}
    run.write(
        "topology", [{"shape": "cluster", "sampled_at": run.at, "primaries": 1, "replicas": 1}]
    )
    run.write(
        "topology_nodes",
        [
            {
                "member": f"cluster.127.0.0.1_{address[-4:]}",
                "address": address,
                "node_id": f"id-{address}",
                "role": role,
                "primary_address": None
                if role == "primary"
                else next(a for a, r in roles.items() if r == "primary"),
                "health": "online",
                "sampled_at": run.at,
                "lag_bytes": (lag_bytes if role == "replica" else None),
                "master_link_status": "up" if role == "replica" else None,
            }
            for address, role in roles.items()
        ],
    )


def quiet_host_load(run: Run, after: bool) -> None:
    """Load samples through the throughput family on 2 cores: no other thread before the
    step (a quiet host: a median and a noise of 0), a CPU hog's 6 after."""
    family_load(run, "throughput", [6 if after else 0] * 4, busy_share=1.0 if after else 0.3)


def prefixed_keys(after: bool) -> list[dict]:
    """Ten user:* strings; ten session:* ones too from the step's night (a new prefix)."""
    prefixes = ("user", "session") if after else ("user",)
    return [
        {
            "key": f"{prefix}:{i}",
            "prefix": f"{prefix}:*",
            "type": "string",
            "encoding": "embstr",
            "elements": 1,
            "memory_usage_bytes": 80,
        }
        for prefix in prefixes
        for i in range(10)
    ]


def scanned_keys(after: bool, rng: random.Random) -> list[dict]:
    """Ten strings and ten hashes of about 100 bytes; the hashes 400 from the step's night."""
    return [
        {
            "key": f"{kind}:{i}",
            "prefix": f"{kind}:*",
            "type": kind,
            "encoding": "raw" if kind == "string" else "listpack",
            "elements": 10,
            "memory_usage_bytes": int(
                (400 if after and kind == "hash" else 100) * rng.uniform(0.98, 1.02)
            ),
        }
        for kind in ("string", "hash")
        for i in range(10)
    ]


@pytest.fixture(scope="module")
def warehouse_path(tmp_path_factory) -> Path:
    """One lake, one environment per story, built once."""
    root = tmp_path_factory.mktemp("causes")
    lake_dir = root / "lake"
    rng = random.Random(7)
    with delta.batch(Lake.at(lake_dir), "test causes"):
        for day in range(NIGHTS):
            after = day >= STEP
            level = (8.0 if after else 10.0) * (1 + rng.gauss(0, 0.01))
            # appendfsync everysec → always on the step's night
            land_night(lake_dir, "config", day, level, "always" if after else "everysec", [])
            # the application's slow KEYS from the step's night (even ids: not the tool's)
            slow = [2 * day + 2] if after else []
            land_night(lake_dir, "slow", day, level, "everysec", slow)
            land_night(lake_dir, "alone", day, level, "everysec", [])
            land_night(lake_dir, "evict", day, level, "everysec", [], evictions(day, after))
            land_night(lake_dir, "failover", day, level, "everysec", [], sentinel_master(after))
            keys = scanned_keys(after, rng)
            land_night(lake_dir, "types", day, level, "everysec", [], keys=keys)
            cluster = land_night(lake_dir, "cluster", day, level, "everysec", [])
            cluster_topology(cluster, after, lag_bytes=0)
            lagging = land_night(lake_dir, "lagging", day, level, "everysec", [])
            cluster_topology(lagging, False, lag_bytes=50_000 if after else 0)
            quiet_host_load(land_night(lake_dir, "quiet", day, level, "everysec", []), after)
            scanned = land_night(lake_dir, "prefix", day, level, "everysec", [])
            keyspace_scan(scanned, prefixed_keys(after), used_memory=10**6)
    warehouse.build(Lake.at(lake_dir), root / "w.duckdb")
    return root / "w.duckdb"


def causes(path: Path, env: str) -> list[tuple]:
    """(rank, kind, candidate, likely, sentence) of the env's pipelining change."""
    con = open_warehouse(path)
    try:
        return con.execute(
            "select cause_rank, kind, candidate, likely, sentence from change_causes"
            " where env = ? and figure = ? and subject = ? order by cause_rank",
            [env, *SPEEDUP],
        ).fetchall()
    finally:
        con.close()


def test_a_configuration_change_is_named_first(warehouse_path):
    found = causes(warehouse_path, "config")
    assert found, "no regression judged"
    rank, kind, candidate, likely, sentence = found[0]
    assert (kind, candidate, likely) == ("environment", "appendfsync", True), found
    assert sentence.startswith("appendfsync everysec → always on 2026-01-19"), sentence


def test_a_new_slow_command_is_named(warehouse_path):
    found = causes(warehouse_path, "slow")
    assert found[0][1:4] == ("workload", "slowlog keys (2 args)", True), found


def test_a_step_with_nothing_else_says_so(warehouse_path):
    assert causes(warehouse_path, "alone") == [
        (1, "nothing", "nothing else moved", False, "nothing else moved")
    ]


def test_evictions_where_there_were_none_are_named(warehouse_path):
    found = causes(warehouse_path, "evict")
    assert found[0][1:4] == ("memory", "evicted keys/s", True), found
    assert "0 in every run of the reference window" in found[0][4], found


def test_a_sentinel_failover_is_named_as_the_topology(warehouse_path):
    found = causes(warehouse_path, "failover")
    assert found[0][1:4] == ("environment", "topology", True), found
    assert found[0][4] == (
        "topology on 2026-01-19's run: Sentinel failover: master 10.0.0.1:6379 → 10.0.0.2:6379"
    ), found


def test_a_cluster_failover_is_named_as_the_topology(warehouse_path):
    found = causes(warehouse_path, "cluster")
    assert found[0][1:4] == ("environment", "topology", True), found
    assert found[0][4] == (
        "topology on 2026-01-19's run: Failover since the previous run:"
        " 127.0.0.1:7002 is a primary now (a replica before),"
        " 127.0.0.1:7001 is a replica now (a primary before)"
    ), found


def test_replica_lag_where_there_was_none_is_named(warehouse_path):
    found = causes(warehouse_path, "lagging")
    assert found[0][1:4] == ("environment", "replica lag max", True), found


def test_the_load_of_a_quiet_host_is_named_from_a_reference_of_none(warehouse_path):
    found = causes(warehouse_path, "quiet")
    assert found[0][1:4] == ("host", "host load per core", True), found
    assert "0 in every run of the reference window, 3 per core" in found[0][4], found


def test_a_new_prefix_is_named(warehouse_path):
    likely = {c for _, _, c, is_likely, _ in causes(warehouse_path, "prefix") if is_likely}
    assert {"prefix session:* keys", "prefix session:* bytes"} <= likely, likely


def test_a_type_whose_share_of_the_key_bytes_moved_is_named(warehouse_path):
    found = causes(warehouse_path, "types")
    likely = {candidate for _, kind, candidate, is_likely, _ in found if is_likely}
    assert {"type hash share of key bytes", "type string share of key bytes"} <= likely, found
    assert found[0][1] == "memory", found


def test_changes_and_the_verdict_event_carry_the_causes(warehouse_path):
    runner = CliRunner()
    table = runner.invoke(
        app, ["changes", "--env", "config", "--warehouse", str(warehouse_path)], terminal_width=400
    )
    assert table.exit_code == 1, table.output
    assert "likely: appendfsync everysec → always" in table.output, table.output
    out = runner.invoke(
        app, ["changes", "--env", "alone", "--warehouse", str(warehouse_path), "--format", "json"]
    )
    rows = json.loads(out.output)["changes"]
    moved = [r for r in rows if r["figure"] == SPEEDUP[0]][0]
    assert (moved["causes_line"], moved["causes"]) == ("nothing else moved", [])
    out = runner.invoke(
        app, ["changes", "--env", "slow", "--warehouse", str(warehouse_path), "--format", "json"]
    )
    moved = [r for r in json.loads(out.output)["changes"] if r["figure"] == SPEEDUP[0]][0]
    assert moved["causes"][0]["candidate"] == "slowlog keys (2 args)", moved
    events = {e["payload"]["env"]: e for e in announce.verdict_events(str(warehouse_path))}
    figure = [f for f in events["config"]["payload"]["moved"] if f["figure"] == SPEEDUP[0]][0]
    assert figure["cause_list"][0]["candidate"] == "appendfsync", figure
    assert figure["causes"].startswith("likely: appendfsync everysec → always"), figure
    assert "likely: appendfsync" in announce.message(events["config"]["payload"])[1]


def test_the_report_row_says_what_else_moved(warehouse_path, tmp_path):
    render_reports(warehouse_path, tmp_path)
    first_screen = "\n".join((tmp_path / "config.md").read_text().splitlines()[:14])
    assert "| what else moved |" in first_screen
    assert "likely: appendfsync everysec → always on 2026-01-19's run" in first_screen
    alone = "\n".join((tmp_path / "alone.md").read_text().splitlines()[:14])
    assert "| nothing else moved |" in alone, alone
    assert "What moved beside each change" not in alone
    # beside the row, everything that moved: likely or not, with the part of the rule it met
    evicting = (tmp_path / "evict.md").read_text()
    details = evicting.split("What moved beside each change")[1].split("</details>")[0]
    assert "| 1 | memory | evicted keys/s: 0 in every run" in details, details
    assert "| likely: new since the change |" in details, details
