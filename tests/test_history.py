"""History: trends, change detection and the comparison report on synthetic lakes built in
the real lake format (hand-made rows, as dbt tests give `given` rows to a model)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
from typer.testing import CliRunner

from yardstick import lake, warehouse
from yardstick.changepoints import series_change_points
from yardstick.cli import app
from yardstick.reports.render import render_reports
from yardstick.schemas import to_table

START = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)


def land_run(lake_dir: Path, env: str, day: int, speedup: float, rps: float,
             version: str = "7.0.15", same_server_as: str | None = None) -> str:
    """One nightly run of `env`: runs, fingerprint and a 2-cell benchmark giving `speedup`."""
    started = START + timedelta(days=day)
    run_id = lake.new_run_id(started)
    lake.write(lake_dir, "runs", env, run_id, to_table("runs", [{
        "profile": "nightly", "started_at": started, "finished_at": started, "duration_s": 1.0,
        "status": "ok", "mode": "scratch", "transport": "direct", "url": "redis://x:1/0",
        "same_server_as": same_server_as, "prober_on_host": True,
    }]))
    facts = [("server", "redis_version", version), ("probe", "transport", "direct"),
             ("probe", "prober_on_host", "true"), ("prober", "cores", "2")]
    lake.write(lake_dir, "fingerprint", env, run_id, to_table(
        "fingerprint", [{"section": s, "key": k, "value": v} for s, k, v in facts]))
    cells = [{"repetition": 0, "clients": 1, "pipeline": p, "payload_bytes": 3,
              "requests": 1000, "test": "SET", "status": "ok", "rps": value,
              "p50_ms": 0.02, "p99_ms": 0.05}
             for p, value in ((1, rps), (16, rps * speedup))]
    lake.write(lake_dir, "benchmark", env, run_id, to_table("benchmark", cells))
    return run_id


def build(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """Build the warehouse from tmp_path/lake and open it."""
    warehouse.build(tmp_path / "lake", tmp_path / "w.duckdb")
    return duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)


def noisy(value: float, share: float, rng: random.Random) -> float:
    """`value` with Gaussian noise whose standard deviation is `share` of it (± share)."""
    return value * (1 + rng.gauss(0, share))


def verdict(con, env: str, figure: str, subject: str) -> str:
    """The latest run's verdict for one series."""
    return con.execute(
        "select verdict from changes where env = ? and figure = ? and subject = ?",
        [env, figure, subject],
    ).fetchone()[0]


SPEEDUP = "pipeline_speedup", "set c1 3B"
RPS = "bench_rps", "set c1 P1 3B"


def test_step_of_20_percent_is_found_at_the_right_run(tmp_path):
    rng = random.Random(13)
    run_ids = [
        land_run(tmp_path / "lake", "a", day, noisy(10 if day < 15 else 12, 0.02, rng), 1e5)
        for day in range(30)
    ]
    con = build(tmp_path)
    points = series_change_points(con, "a", *SPEEDUP)
    assert [p.run_id for p in points] == [run_ids[15]]
    assert 0.15 < points[0].change_share < 0.25


def test_step_in_the_latest_run_is_judged_by_direction(tmp_path):
    rng = random.Random(13)
    for day in range(20):
        speedup = 10.0 if day < 19 else 8.0  # fewer rps from pipelining: worse
        rps = 1e5 if day < 19 else 1.2e5     # more rps: better
        land_run(tmp_path / "lake", "a", day, noisy(speedup, 0.02, rng), noisy(rps, 0.02, rng))
    con = build(tmp_path)
    assert verdict(con, "a", *SPEEDUP) == "regression"
    assert verdict(con, "a", *RPS) == "improvement"


def test_pure_noise_is_no_regression(tmp_path):
    rng = random.Random(13)
    for day in range(40):
        land_run(tmp_path / "lake", "a", day, noisy(10, 0.03, rng), noisy(1e5, 0.03, rng))
    con = build(tmp_path)
    assert verdict(con, "a", *SPEEDUP) == "steady"
    assert verdict(con, "a", *RPS) == "steady"
    assert series_change_points(con, "a", *SPEEDUP) == []


def test_a_noisy_series_is_unstable_not_judged(tmp_path):
    rng = random.Random(13)
    for day in range(40):
        land_run(tmp_path / "lake", "a", day, noisy(10, 0.15, rng), noisy(1e5, 0.15, rng))
    con = build(tmp_path)
    assert verdict(con, "a", *SPEEDUP) == "unstable"
    assert verdict(con, "a", *RPS) == "unstable"


def test_a_new_version_is_flagged_not_called_a_regression(tmp_path):
    rng = random.Random(13)
    for day in range(20):
        version = "7.0.15" if day < 19 else "7.4.1"
        rps = 1e5 if day < 19 else 0.6e5  # the new environment is slower: not a regression
        land_run(tmp_path / "lake", "a", day, noisy(10, 0.02, rng), noisy(rps, 0.02, rng),
                 version=version)
    con = build(tmp_path)
    assert verdict(con, "a", *RPS) == "environment changed"
    changed = con.execute(
        "select count(*) from figure_trends where env = 'a' and environment_changed"
        " and figure = 'bench_rps' and subject = ?", [RPS[1]]).fetchone()[0]
    assert changed == 1
    # The absolute series restarts at the change: no change point is claimed across it.
    assert series_change_points(con, "a", *RPS) == []


def test_comparison_report_holds_every_environment(tmp_path):
    for day in range(2):
        for env, partner in (("a", None), ("a-fwd", "a"), ("b", None)):
            land_run(tmp_path / "lake", env, day, 10.0, 1e5, same_server_as=partner)
    build(tmp_path).close()
    render_reports(tmp_path / "w.duckdb", tmp_path / "out")
    text = (tmp_path / "out" / "comparison.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| figure | subject |"))
    # Pairs sit together: a, then its forwarded twin, then b.
    assert header.split("|")[3:6] == [" a ", " a-fwd ", " b "]
    assert "## Ratios (transfer)" in text and "## Absolutes" in text
    assert "`pipeline_speedup`" in text.split("## Absolutes")[0]
    assert "`bench_rps`" in text.split("## Absolutes")[1]


def test_cli_on_empty_and_unknown(tmp_path):
    (tmp_path / "lake").mkdir()
    build(tmp_path).close()
    runner = CliRunner()
    result = runner.invoke(app, ["changes", "--warehouse", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 0 and "no history yet" in result.output
    land_run(tmp_path / "lake", "a", 0, 10.0, 1e5)
    build(tmp_path).close()
    result = runner.invoke(
        app, ["trend", "--env", "a", "--figure", "pipeline_speedup",
              "--warehouse", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 2 and "--subject" in result.output and "set c1 3B" in result.output
    result = runner.invoke(
        app, ["trend", "--env", "a", "--figure", "pipeline_speedup", "--subject", "set c1 3B",
              "--warehouse", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 0 and "latest run: new" in result.output


def test_changes_speak_only_of_the_latest_run(tmp_path):
    """A family missing tonight leaves no verdict from an older night under 'latest run'."""
    for day in range(5):
        land_run(tmp_path / "lake", "a", day, 10.0, 1e5)
    started = START + timedelta(days=5)
    run_id = lake.new_run_id(started)  # tonight: the benchmark did not run
    lake.write(tmp_path / "lake", "runs", "a", run_id, to_table("runs", [{
        "profile": "nightly", "started_at": started, "status": "partial", "mode": "scratch",
    }]))
    con = build(tmp_path)
    assert con.execute("select count(*) from changes").fetchone()[0] == 0


def test_a_ratio_that_moves_with_a_new_version_is_flagged(tmp_path):
    rng = random.Random(21)
    for day in range(20):
        version, speedup = ("7.0.15", 10.0) if day < 19 else ("7.4.1", 7.0)
        land_run(tmp_path / "lake", "a", day, noisy(speedup, 0.02, rng), 1e5, version=version)
    assert verdict(build(tmp_path), "a", *SPEEDUP) == "environment changed"
