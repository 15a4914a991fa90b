"""Stalled repetitions: a benchmark repetition whose wall time is far beyond its peers' is
named in the report and left out of its cell's median (hand-made lake rows, no Redis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import open_warehouse

from yardstick.reports.render import render_reports
from yardstick.storage import dbt, delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table

pytestmark = pytest.mark.server_agnostic

START = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def land_run(lake_dir: Path, env: str, cells: dict[str, list[tuple]], memtier: list[float]) -> str:
    """One nightly run of `env`: per test, (elapsed_s, rps) of each repetition of one
    redis-benchmark cell (c50 P1 3B: the tests of a repetition share one invocation, so the
    same wall time), and the wall time of each memtier_benchmark run."""
    run_id = delta.new_run_id(START)
    delta.write(
        Lake.at(lake_dir),
        "runs",
        env,
        run_id,
        to_table(
            "runs",
            [
                {
                    "profile": "nightly",
                    "started_at": START,
                    "finished_at": START,
                    "duration_s": 1.0,
                    "status": "ok",
                    "mode": "scratch",
                    "transport": "direct",
                    "url": "redis://x:1/0",
                }
            ],
        ),
    )
    rows = [
        {
            "repetition": rep,
            "clients": 50,
            "pipeline": 1,
            "payload_bytes": 3,
            "requests": 1000,
            "test": test,
            "status": "ok",
            "rps": rps,
            "p50_ms": 0.2,
            "p99_ms": 0.5,
            "started_at": START,
            "elapsed_s": elapsed,
        }
        for test, repetitions in cells.items()
        for rep, (elapsed, rps) in enumerate(repetitions)
    ]
    delta.write(Lake.at(lake_dir), "benchmark", env, run_id, to_table("benchmark", rows))
    if memtier:
        runs = [
            {
                "op_type": op,
                "count": 1000.0,
                "ops_sec": ops,
                "hits_sec": 0.0,
                "misses_sec": 0.0,
                "p50_ms": 0.1,
                "p99_ms": 0.3,
                "p999_ms": 0.5,
                "ratio": "1:10",
                "threads": 1,
                "clients_per_thread": 10,
                "data_size_bytes": 32,
                "started_at": START + timedelta(seconds=20 * rep),
                "elapsed_s": elapsed,
            }
            for rep, elapsed in enumerate(memtier)
            for op, ops in (("sets", 10_000.0 / elapsed), ("totals", 100_000.0 / elapsed))
        ]
        delta.write(Lake.at(lake_dir), "memtier", env, run_id, to_table("memtier", runs))
    return run_id


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """One warehouse and its reports: `stalled` (one 60 s freeze in a 3-repetition cell, a
    memtier run 4.5× the others) and `steady` (3 repetitions, sub-second spread only) built in
    full, then `two` (2 repetitions, one 20× the other: not judged) added by an incremental
    update: the first batch's stalls must still be reported."""
    root = tmp_path_factory.mktemp("stalls")
    lake_dir = root / "lake"
    land_run(
        lake_dir,
        "stalled",
        {
            "SET": [(1.0, 80_000.0), (61.0, 1_328.0), (1.1, 82_000.0)],
            "GET": [(1.0, 90_000.0), (61.0, 89_000.0), (1.1, 91_000.0)],
        },
        memtier=[2.0, 9.0, 2.2],
    )
    land_run(
        lake_dir,
        "steady",
        {
            "SET": [(0.05, 80_000.0), (0.4, 10_000.0), (0.06, 82_000.0)],
        },
        memtier=[2.0, 2.1, 2.2],
    )
    path = warehouse.build(Lake.at(lake_dir), root / "w.duckdb")
    land_run(lake_dir, "two", {"SET": [(1.0, 80_000.0), (20.0, 4_000.0)]}, memtier=[2.0, 9.0])
    assert warehouse.update(Lake.at(lake_dir), path).mode == "incremental"
    written = render_reports(path, root / "out")
    return path, {env: report.read_text() for env, report in written.items()}


def test_the_rule_passes_its_dbt_unit_test(built):
    result = dbt.run(built[0], ["test", "--select", "timed_repetitions"])
    kinds = {unique_id.split(".")[0] for unique_id, _, _ in result.nodes}
    assert "unit_test" in kinds
    assert all(status in ("pass", "success") for _, status, _ in result.nodes), result.nodes


def test_a_stalled_repetition_is_named_and_left_out_of_the_median(built):
    path, reports = built
    con = open_warehouse(path)
    try:
        figures = {
            (f, s): tuple(rest)
            for f, s, *rest in con.execute(
                "select figure, subject, value, n, min_value from figures where env = 'stalled'"
            ).fetchall()
        }
    finally:
        con.close()
    # The median of the two others (81,000), not of all three (80,000); 1,328 is no minimum.
    assert figures[("bench_rps", "set c50 P1 3B")] == (81_000.0, 2, 80_000.0)
    assert figures[("bench_rps", "get c50 P1 3B")] == (90_500.0, 2, 90_000.0)
    assert figures[("bench_stalled_repetitions", "set c50 P1 3B")][0] == 1
    assert figures[("memtier_ops_sec", "totals")][:2] == (
        pytest.approx((100_000 / 2.0 + 100_000 / 2.2) / 2),
        2,
    )

    text = reports["stalled"]
    assert "| set c50 P1 3B | 81,000 |" in text and "| 2 (+1 stalled) |" in text
    assert (
        "- set c50 P1 3B repetition 1: 61 s against a median of 1.05 s for its 2 other"
        " repetitions (58.1×); 1,328 requests/s against 81,000." in text
    )
    assert "- get c50 P1 3B repetition 1: 61 s" in text
    assert "left out of their cells' median and n" in text
    assert "**Stalled runs**, left out of every median and n below: repetition 1 took 9 s" in text
    assert "against a median of 2.10 s for the 2 other runs (4.29×)" in text


def test_sub_second_spread_is_no_stall_and_says_nothing(built):
    text = built[1]["steady"]
    assert "| 3 |" in text  # the slow-looking 0.4 s repetition stays in the median
    assert "Stalled" not in text and "stalled)" not in text
    assert "timed repetitions" not in text and "cannot be told apart" not in text


def test_two_repetitions_are_not_judged_and_the_report_says_so(built):
    path, reports = built
    con = open_warehouse(path)
    try:
        rps = con.execute(
            "select value, n from figures where env = 'two' and figure = 'bench_rps'"
        ).fetchone()
        counted = con.execute(
            "select count(*) from figures where env = 'two' and figure like '%stalled%'"
        ).fetchone()[0]
    finally:
        con.close()
    assert rps == (42_000.0, 2) and counted == 0  # folded in: there is no majority to judge by
    text = reports["two"]
    assert "No cell had 3 timed repetitions or more: stalls" in text
    assert "With 2 runs a stalled one (far slower than the others) cannot be told apart" in text
    assert "Stalled" not in text
