"""Golden figures: a fixed synthetic lake, built into a warehouse, gives exactly the figures and
verdicts stored in tests/samples/golden_figures.json. A change to the SQL models, the schemas
or the build that moves any figure fails here, naming the rows that moved.

The lake (tests/lakes.py, seeded, stable run ids): two environments over fourteen nights (a
verdict needs ten runs of baseline). Each night, a nightly run of the round-trip (PING windows,
histogram, commandstats, latencystats), throughput (a 2x2x2 redis-benchmark grid, 3
repetitions), memtier (3 repetitions), intrinsic, counters and slowlog families; two
collections a day between nights (commandstats and SLOWLOG only). On the last two nights the
run also lands the families whose rows are hard to make by hand, replayed from one real run
(tests/samples/recorded_families.json: memory, keyspace, latency monitor and the scratch
experiments slow_commands, contention, agreement) and three paired transport rounds: every
family of yardstick/tasks/ gives figures here. `alpha` (Redis 7.2.4) gets a
20 % longer round trip and 10 % fewer requests per second for its last two nights; `beta`
(Valkey 8.1.8, which answers redis_version 7.2.4) is upgraded to 8.1.9 on its last night.

Compared: every row of `figures` (env, figure, subject, run_id, value to 9 significant
digits, unit, nature, n) and of `changes` (env, figure, subject, run_id, verdict, baseline_n,
change_share to 9 significant digits), sorted.

When a change is meant to move figures, regenerate the expectation deliberately and review
its diff with the change:

    YARDSTICK_REGENERATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_figures.py
    git diff tests/samples/golden_figures.json

tests/samples/recorded_families.json was taken once from a real run of those families on a
real redis-server (tables as landed; timestamps are moved to each replaying run's start).
"""

from __future__ import annotations

import csv
import difflib
import json
import math
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import lakes
import pytest

from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake

EXPECTED = Path(__file__).parent / "samples" / "golden_figures.json"
RECORDED = Path(__file__).parent / "samples" / "recorded_families.json"
CATALOG = Path(__file__).parent.parent / "yardstick" / "sql" / "seeds" / "figure_catalog.csv"
REGENERATE = os.environ.get("YARDSTICK_REGENERATE_GOLDEN") == "1"

FIRST_NIGHT = datetime(2025, 6, 1, 2, 0, tzinfo=UTC)
NIGHTS = 14
STEP_FROM = 12  # alpha's round trip is 20 % longer, its throughput 10 % lower, from this night
FAMILIES = [
    "fingerprint",
    "round_trip",
    "throughput",
    "memtier",
    "intrinsic",
    "counters",
    "slowlog",
]
# Landed on the last nights only (figures, not verdicts, are what they add; each file costs).
RECORDED_FROM = NIGHTS - 2
RECORDED_FAMILIES = [
    "transport",
    "memory",
    "keyspace",
    "latency_monitor",
    "slow_commands",
    "contention",
    "agreement",
]
ENVIRONMENTS = {
    # env: (redis_version, product per night or None, base round trip in µs)
    "alpha": ("7.2.4", None, 60.0),
    "beta": ("7.2.4", ("valkey", "8.1.8"), 140.0),
}


def land_nights(lake_dir: Path, nights: int) -> None:
    """The fixed lake cut to its first `nights` nights, the last two landing every family."""
    global NIGHTS, RECORDED_FROM
    saved = NIGHTS, RECORDED_FROM
    NIGHTS, RECORDED_FROM = nights, nights - 2
    try:
        _land_lake(lake_dir)
    finally:
        NIGHTS, RECORDED_FROM = saved


def _land_lake(lake_dir: Path) -> None:
    """The fixed lake (see the module's docstring)."""
    rng = random.Random(20250601)
    recording = json.loads(RECORDED.read_text())
    recorded_at = datetime.fromisoformat(recording["recorded_at"])
    for env, (redis_version, product, base_rtt) in ENVIRONMENTS.items():
        slowlog_ids = 0
        snapshots = 0
        for night in range(NIGHTS):
            at = FIRST_NIGHT + timedelta(days=night)
            step = env == "alpha" and night >= STEP_FROM
            if product and night == NIGHTS - 1:
                product = (product[0], "8.1.9")
            # The nightly run.
            run = lakes.new_run(lake_dir, env, at, lakes.stable_run_id(at, env))
            lakes.runs_row(
                run, "nightly", duration_s=300.0, host_group="local", tool_version="golden"
            )
            families = FAMILIES + RECORDED_FAMILIES * (night >= RECORDED_FROM)
            lakes.steps(
                run,
                {family: lakes.digest("nightly", family) for family in families},
                finished_at=at + timedelta(seconds=30),
                duration_s=30.0,
            )
            lakes.fingerprint(
                run,
                redis_version,
                product=product,
                cores=4,
                facts={("prober", "cpu_model"): "Golden CPU @ 2.0GHz"},
            )
            lakes.ping(run, rtt_us=base_rtt * (1.2 if step else 1.0), rng=rng)
            lakes.latencystats(run, {50.0: 1.0, 99.0: 2.5, 99.9: 4.0 + night % 2})
            scale = 0.9 if step else 1.0
            lakes.benchmark(
                run,
                [
                    lakes.cell(
                        test,
                        clients,
                        pipeline,
                        scale
                        * 30000.0
                        * pipeline**0.8
                        * (1 + clients / 20)
                        * (1 + rng.uniform(-0.03, 0.03)),
                        repetition=rep,
                        payload_bytes=64,
                        requests=100000,
                        p50_ms=0.05 * clients * (1 + rng.uniform(-0.02, 0.02)),
                        p99_ms=0.2 * clients,
                        elapsed_s=2.0,
                        started_at=at,
                        host_busy_share=0.4,
                    )
                    for test in ("SET", "GET")
                    for clients in (1, 50)
                    for pipeline in (1, 16)
                    for rep in range(3)
                ],
            )
            lakes.memtier(
                run,
                [
                    {
                        op: scale * ops * (1 + rng.uniform(-0.02, 0.02))
                        for op, ops in (("sets", 9e3), ("gets", 9e4), ("totals", 9.9e4))
                    }
                    for _ in range(3)
                ],
                hit_share=0.75,
            )
            lakes.intrinsic(run, max_us=40.0 + 5 * night, avg_ns_per_run=38.0 + night % 3)
            if night >= RECORDED_FROM:
                lakes.transport(
                    run, [(1e5, 50.0, 6e4, 90.0), (1e5, 52.0, 5e4, 110.0), (9e4, 51.0, 6e4, 95.0)]
                )
                lakes.recorded(run, recording["tables"], recorded_at)
            snapshots += 1
            lakes.commandstats_snapshot(run, _calls(snapshots), uptime_s=3600 * snapshots)
            slowlog_ids += 16
            lakes.slowlog_collection(
                run, range(max(0, slowlog_ids - 128), slowlog_ids), redis_version=redis_version
            )
            # Two collections before the next night.
            for hours in (8, 16):
                collection = lakes.new_run(
                    lake_dir,
                    env,
                    at + timedelta(hours=hours),
                    lakes.stable_run_id(at + timedelta(hours=hours), env),
                )
                lakes.runs_row(collection, "collect", duration_s=0.5)
                lakes.steps(
                    collection,
                    {
                        "counters": lakes.digest("collect", "counters"),
                        "slowlog": lakes.digest("collect", "slowlog"),
                    },
                )
                snapshots += 1
                lakes.commandstats_snapshot(
                    collection, _calls(snapshots), uptime_s=3600 * snapshots
                )
                slowlog_ids += 16 + 8 * (hours == 16)
                lakes.slowlog_collection(
                    collection,
                    range(max(0, slowlog_ids - 128), slowlog_ids),
                    redis_version=redis_version,
                )


def _calls(snapshot: int) -> dict[str, int]:
    """Cumulative commandstats calls at the `snapshot`-th snapshot of one server run."""
    return {
        "get": 90_000 * snapshot + 7 * snapshot**2,
        "set": 10_000 * snapshot,
        "ping": 500 * snapshot,
        "sort": 3 * snapshot,
    }


def _round(value: float | None) -> float | str | None:
    """`value` to 9 significant digits (JSON has no NaN or infinity: those as text)."""
    if value is None:
        return None
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return float(f"{value:.9g}")


def _observed(con: duckdb.DuckDBPyConnection) -> dict[str, list[list]]:
    figures = con.execute(
        "select env, figure, subject, run_id, value, unit, nature, n from figures"
        " order by env, figure, subject, run_id"
    ).fetchall()
    changes = con.execute(
        "select env, figure, subject, run_id, verdict, baseline_n, change_share from changes"
        " order by env, figure, subject, run_id"
    ).fetchall()
    return {
        "figures": [[*r[:4], _round(r[4]), *r[5:]] for r in figures],
        "changes": [[*r[:6], _round(r[6])] for r in changes],
    }


def _dump(observed: dict[str, list[list]]) -> str:
    """The expectation as JSON, one row per line (reviewable as a diff)."""
    parts = []
    for key, rows in observed.items():
        body = ",\n".join("    " + json.dumps(row, ensure_ascii=False) for row in rows)
        parts.append(f'  "{key}": [\n{body}\n  ]')
    return "{\n" + ",\n".join(parts) + "\n}\n"


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> dict[str, list[list]]:
    """The fixed lake, built once; its figures and verdicts."""
    root = tmp_path_factory.mktemp("golden")
    with delta.batch(
        Lake.at(root / "lake"), "golden lake"
    ):  # one commit per table, not one per run
        _land_lake(root / "lake")
    con = warehouse.connect_read_only(warehouse.build(Lake.at(root / "lake"), root / "w.duckdb"))
    try:
        observed = _observed(con)
    finally:
        con.close()
    if REGENERATE:
        EXPECTED.write_text(_dump(observed))
    return observed


def _compare(observed: dict[str, list[list]], key: str) -> None:
    if REGENERATE:
        pytest.skip(f"regenerated {EXPECTED.name} (YARDSTICK_REGENERATE_GOLDEN=1): review its diff")
    assert EXPECTED.exists(), f"no {EXPECTED}: run with YARDSTICK_REGENERATE_GOLDEN=1 once"
    expected = json.loads(EXPECTED.read_text())[key]
    got = json.loads(json.dumps(observed[key]))  # tuples and floats as the file holds them
    if got != expected:
        diff = difflib.unified_diff(
            [json.dumps(r, ensure_ascii=False) for r in expected],
            [json.dumps(r, ensure_ascii=False) for r in got],
            "expected",
            "observed",
            lineterm="",
            n=0,
        )
        lines = list(diff)
        pytest.fail(
            f"{key} moved ({len(expected)} rows expected, {len(got)} observed); if meant, "
            "regenerate with YARDSTICK_REGENERATE_GOLDEN=1 and review the diff:\n"
            + "\n".join(lines[:60])
            + ("\n..." if len(lines) > 60 else "")
        )


def test_the_figures_of_the_fixed_lake_are_the_stored_ones(observed):
    _compare(observed, "figures")


def test_the_verdicts_of_the_fixed_lake_are_the_stored_ones(observed):
    _compare(observed, "changes")


def test_the_fixed_lake_covers_every_family_it_lands(observed):
    """The expectation is worth something only while each family still gives figures: every
    family of the figure catalog but topology (its figures need a cluster's or a sentinel's
    members: tests/test_topology_models.py)."""
    with CATALOG.open() as f:
        family_of = {row["figure"]: row["family"] for row in csv.DictReader(f)}
    covered = {family_of[row[1]] for row in observed["figures"]}
    assert covered == set(family_of.values()) - {"topology"}, covered
    verdicts = {row[4] for row in observed["changes"]}
    assert {"regression", "environment changed", "steady"} <= verdicts, verdicts


def test_a_lake_of_the_earlier_format_migrated_gives_the_same_figures(observed, tmp_path):
    """The fixed lake landed in the format before Delta Lake (some partitions compacted, one
    compaction killed before deleting its inputs), migrated, gives the stored figures."""
    import legacy_lake

    from yardstick.storage import delta, migrate

    old = tmp_path / "lake"
    write, lakes.delta.write = lakes.delta.write, legacy_lake.write
    try:
        _land_lake(old)
    finally:
        lakes.delta.write = write
    assert not list(old.glob("*/_delta_log"))
    for i, folder in enumerate(sorted(old.glob("runs/env=*/period=*"))):
        env, period = folder.parent.name[4:], folder.name[7:]
        legacy_lake.compact_partition(old, "runs", env, period, keep_inputs=i == 0)
    assert migrate.needed(Lake.at(old))
    report = migrate.migrate(Lake.at(old))
    assert report.tables["runs"] and not migrate.needed(Lake.at(old))
    assert not list(old.rglob("compacted-g*.parquet"))
    assert "runs" in delta.tables_present(Lake.at(old))
    con = warehouse.connect_read_only(warehouse.build(Lake.at(old), tmp_path / "w.duckdb"))
    try:
        migrated = _observed(con)
    finally:
        con.close()
    assert migrated == observed
    # Run again (as the first compaction would): nothing left to do, nothing doubled.
    assert migrate.migrate(Lake.at(old)).tables == {}
