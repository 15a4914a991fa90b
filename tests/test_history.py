"""History: series, verdicts, change detection and the comparison report on synthetic lakes
built in the real lake format (hand-made rows, as dbt tests give `given` rows to a model).

One lake holds one environment per story (a step, noise, an outlier, a profile switch, a
crashed run, an upgrade) and is built once: each dbt build costs seconds."""

from __future__ import annotations

import math
import random
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from conftest import open_warehouse
from lakes import benchmark, cell, fingerprint, new_run, runs_row, steps
from typer.testing import CliRunner

from yardstick.app.cli import app
from yardstick.reports.changepoints import series_change_points
from yardstick.reports.render import render_reports
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake

START = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
QUICK, NIGHTLY = "0a1b2c3d4e5f", "9f8e7d6c5b4a"  # params digests of the two profiles


def land_run(
    lake_dir: Path,
    env: str,
    day: int,
    speedup: float,
    rps: float,
    version: str = "7.0.15",
    same_server_as: str | None = None,
    profile: str = "nightly",
    digest: str | None = None,
    run_row: bool = True,
    rebaseline: dict | None = None,
) -> str:
    """One run of `env`: runs, steps, fingerprint and a 2-cell benchmark giving `speedup`.
    Without `run_row`, the run was killed before it could land its run row."""
    run = new_run(lake_dir, env, START + timedelta(days=day))
    if run_row:
        steps(run, {"throughput": digest or (NIGHTLY if profile == "nightly" else QUICK)})
        runs_row(
            run, profile, finished_at=run.at, url="redis://x:1/0", same_server_as=same_server_as
        )
    fingerprint(run, version)
    if rebaseline is not None:  # the environments file's `rebaseline:` entry, as a run lands it
        run.write("rebaselines", [rebaseline])
    benchmark(run, [cell("SET", 1, p, value) for p, value in ((1, rps), (16, rps * speedup))])
    return run.run_id


def build(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """Build the warehouse from tmp_path/lake and open it."""
    warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")
    return open_warehouse(tmp_path / "w.duckdb")


def noisy(value: float, share: float, rng: random.Random) -> float:
    """`value` with Gaussian noise whose standard deviation is `share` of it."""
    return value * (1 + rng.gauss(0, share))


def within(value: float, share: float, rng: random.Random) -> float:
    """`value` somewhere within ± `share` of it (bounded noise)."""
    return value * (1 + rng.uniform(-share, share))


def verdict(con, env: str, figure: str, subject: str) -> str:
    """The latest run's verdict for one series."""
    return con.execute(
        "select verdict from changes where env = ? and figure = ? and subject = ?",
        [env, figure, subject],
    ).fetchone()[0]


def verdicts_over_time(con, env: str, figure: str, subject: str) -> list[str]:
    """The verdict every run of one series got, oldest first."""
    return [
        r[0]
        for r in con.execute(
            "select verdict from figure_trends where env = ? and figure = ? and subject = ?"
            " order by started_at",
            [env, figure, subject],
        ).fetchall()
    ]


ALARMS = ("regression", "improvement", "changed")


def project_vars() -> dict:
    """The verdict's dbt vars as yardstick/sql/dbt_project.yml sets them."""
    import yaml

    project = Path(__file__).parents[1] / "yardstick" / "sql" / "dbt_project.yml"
    return yaml.safe_load(project.read_text())["vars"]


REBASELINE = {
    "figure": "pipeline_speedup", "subject": None, "declared": START.date() + timedelta(days=45),
    "declared_by": "ops@example.com", "why": "pipelining off by design since the 7.4 upgrade",
}  # fmt: skip
LONG_NIGHTS = 70  # of the standing stories: long enough for the reference to take in a step
SPEEDUP = "pipeline_speedup", "set c1 3B"
RPS = "bench_rps", "set c1 P1 3B"


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """One lake, one environment per story, built once; run ids per environment."""
    root = tmp_path_factory.mktemp("history")
    lake_dir = root / "lake"
    rng = random.Random(13)
    runs: dict[str, list[str]] = {}

    def land(env: str, day: int, speedup: float, rps: float, **kw) -> None:
        runs.setdefault(env, []).append(land_run(lake_dir, env, day, speedup, rps, **kw))

    # One Delta commit per table for the whole history (as a collection lands), not ~1,200.
    with delta.batch(Lake.at(lake_dir), "test history"):
        for day in range(30):
            # A 20 % step in the last two runs of a series with ±5 % noise: worse pipelining,
            # more requests per second.
            step = day >= 28
            land(
                "step",
                day,
                within(8.0 if step else 10.0, 0.05, rng),
                within(1.2e5 if step else 1e5, 0.05, rng),
            )
            # A real step half-way, for the change-point locator.
            land("located", day, noisy(12 if day >= 15 else 10, 0.02, rng), 1e5)
            # One run 40 % off in the middle, then back: never a regression.
            land("outlier", day, within(14.0 if day == 20 else 10.0, 0.01, rng), 1e5)
            # One run 40 % off, tonight: one run is no alarm yet.
            land("outlier-tonight", day, within(14.0 if day == 29 else 10.0, 0.01, rng), 1e5)
        for day in range(33):
            # A 5 % step on night 30 in σ = 2 % Gaussian noise; the nights around it carry
            # ordinary noise (within one σ), so the test speaks of the rule, not of the draw.
            after, around = day >= 30, day >= 27
            wobble = max(-0.02, min(0.02, rng.gauss(0, 0.02))) if around else rng.gauss(0, 0.02)
            land("step5", day, (9.5 if after else 10.0) * (1 + wobble), 1e5)
        for day in range(40):
            land("noise", day, within(10, 0.10, rng), within(1e5, 0.10, rng))  # ± 10 %
            land("quiet", day, noisy(10, 0.01, rng), noisy(1e5, 0.01, rng))  # σ 1 %
        # Four quick runs, then a nightly run: another workload, twice the speedup.
        for day in range(4):
            land("switch", day, within(10, 0.01, rng), 1e5, profile="quick")
        land("switch", 4, 20.0, 2e5, profile="nightly")
        # A run killed before its run row, between complete ones.
        for day in range(6):
            land("crashed", day, 10.0, 1e5, run_row=day != 3)
        # An upgrade tonight: slower (absolute) and a ratio moved with it.
        for day in range(20):
            version = "7.0.15" if day < 19 else "7.4.1"
            land(
                "upgrade",
                day,
                within(10.0 if day < 19 else 7.0, 0.02, rng),
                within(1e5 if day < 19 else 0.6e5, 0.02, rng),
                version=version,
            )
        # σ = 2 % noise (a fixed cycle), then from night 30 a level 4 % lower, night after
        # night: 2 σ a run, which three runs together never show at alpha (the several-run
        # test), but which the scan, over more runs since the step, calls.
        cycle = (1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 0.0)
        for day in range(40):
            land("slow-step", day, 9.6 if day >= 30 else 10.0 * (1 + 0.02 * cycle[day % 7]), 1e5)
        # Their own draws (the stories above keep theirs): σ = 10 % (no number of runs shows
        # 5 %), and σ = 1 % with a 5 % step on night 30 that stands, or returns on night 50.
        own = random.Random(41)
        for day in range(LONG_NIGHTS):
            land("loud", day, noisy(10, 0.10, own), 1e5)
            land("standing", day, noisy(9.5 if day >= 30 else 10, 0.01, own), 1e5)
            land("returned", day, noisy(9.5 if 30 <= day < 50 else 10, 0.01, own), 1e5)
            # The same step, declared the new normal on night 45 (landed with every run after).
            land("rebased", day, noisy(9.5 if day >= 30 else 10, 0.01, own), 1e5,
                 rebaseline=REBASELINE if day >= 45 else None)  # fmt: skip
    warehouse.build(Lake.at(lake_dir), root / "w.duckdb")
    return root, runs


@pytest.fixture
def con(history):
    connection = open_warehouse(history[0] / "w.duckdb")
    yield connection
    connection.close()


def test_a_20_percent_step_in_5_percent_noise_is_a_regression_once_confirmed(con, history):
    assert verdict(con, "step", *SPEEDUP) == "regression"
    assert verdict(con, "step", *RPS) == "improvement"
    # The step's first run alone was not yet called one; no run before it was.
    over_time = verdicts_over_time(con, "step", *SPEEDUP)
    assert over_time[28] == "unconfirmed"
    assert not {"regression", "improvement", "unconfirmed"} & set(over_time[:28])
    share, band, first = con.execute(
        "select change_share, noise_share, first_night from changes"
        " where env = 'step' and figure = ? and subject = ?",
        list(SPEEDUP),
    ).fetchone()
    assert -0.3 < share < -0.1 and 0 < band < abs(share) and first


def test_a_5_percent_step_in_2_percent_noise_is_a_regression_by_the_third_night(con, history):
    """The last three runs together see what no single run can: 2.5 σ three times."""
    over_time = verdicts_over_time(con, "step5", *SPEEDUP)
    assert len(over_time) == 33
    assert not set(ALARMS) & set(over_time[:30]), over_time
    assert over_time[32] == "regression", over_time[28:]
    row = con.execute(
        "select change_share, recent_n, reference_n, noise_sigma_share, p_value, change_score,"
        " change_since, first_night, evidence from report_changes"
        " where env = 'step5' and figure = ? and subject = ?",
        list(SPEEDUP),
    ).fetchone()
    share, recent_n, reference_n, sigma, p_value, score, since, first, evidence = row
    alpha = project_vars()["verdict_alpha"]
    assert -0.07 < share < -0.03 and recent_n == 3 and reference_n == 30
    assert 0.01 < sigma < 0.03 and p_value <= alpha and score < -3
    started = con.execute(
        "select started_at from figure_trends where run_id = ? and figure = ? and subject = ?",
        [history[1]["step5"][30], *SPEEDUP],
    ).fetchone()[0]
    assert since == started  # the change holds since the step's night
    # "new tonight" the night it was first said (this one, or the night before), not after.
    said = con.execute(
        "select first_night from figure_trends where env = 'step5' and figure = ?"
        " and subject = ? and verdict = 'regression' order by started_at",
        list(SPEEDUP),
    ).fetchall()
    assert [r[0] for r in said] == [True] + [False] * (len(said) - 1)
    assert first == (len(said) == 1)
    assert f"since {started:%Y-%m-%d}" in evidence and "p = " in evidence


def test_a_step_the_several_run_test_misses_is_called_by_the_scan(con, history):
    """2 σ a run: three runs together are no change at alpha, yet the scan, over more runs since
    the step, calls it, the first test to, saying so and since the step's night."""
    rows = con.execute(
        "select verdict, verdict_test, change_since, scan_score from figure_trends"
        " where env = 'slow-step' and figure = ? and subject = ? order by started_at",
        list(SPEEDUP),
    ).fetchall()
    said = [night for night, r in enumerate(rows) if r[0] in ALARMS]
    assert said and min(said) >= 31 and said == list(range(min(said), len(rows))), rows[28:]
    first = rows[min(said)]
    h = project_vars()["verdict_scan_threshold"]
    assert first[:2] == ("regression", "scan") and first[3] >= h, rows[28:]
    step_night = START + timedelta(days=30)
    assert first[2] == step_night  # the window's runs since the step, not the night it was said
    assert all(r[1] == "scan" and r[2] == step_night for r in rows[min(said) :]), rows[30:]
    evidence, standing = con.execute(
        "select evidence, standing from report_changes where env = 'slow-step' and figure = ?"
        " and subject = ?",
        list(SPEEDUP),
    ).fetchone()
    said_by = f"scan since {step_night:%Y-%m-%d}: -" if not standing else "(said by the scan test)"
    assert said_by in evidence, evidence


def test_noise_raises_no_alarm_and_says_when_it_hides_5_percent(con):
    for env in ("noise", "quiet"):
        for series in (SPEEDUP, RPS):
            over_time = verdicts_over_time(con, env, *series)
            assert len(over_time) == 40
            assert not {"regression", "improvement", "changed"} & set(over_time), (env, series)
    # ± 10 % noise: a 5 % change would hide in it even over a week of runs, and the verdict
    # says so with its band.
    assert verdict(con, "noise", *SPEEDUP) == "noisy"
    assert (
        con.execute(
            "select noise_share from changes where env = 'noise' and figure = ? and subject = ?",
            list(SPEEDUP),
        ).fetchone()[0]
        > 0.05
    )
    # The smallest change it could see, in numbers and in words.
    visible, evidence = con.execute(
        "select visible_change_share, evidence from report_changes"
        " where env = 'noise' and figure = ? and subject = ?",
        list(SPEEDUP),
    ).fetchone()
    assert visible > 0.05 and f"changes under {math.ceil(visible * 100)} %" in evidence
    assert verdict(con, "quiet", *SPEEDUP) == "steady"
    judged, noisy, figures = con.execute(
        "select judged, noisy, figures from verdicts where env = 'quiet'"
    ).fetchone()
    assert judged + noisy == figures and judged > noisy


def test_the_long_test_waits_for_every_run_where_none_could_show_the_change(con):
    """σ = 10 %: even infinitely many runs could not show 5 % at alpha, so the long test asks
    for verdict_max_recent_runs runs (DuckDB's greatest() ignoring a NULL made it 3)."""
    k_max = project_vars()["verdict_max_recent_runs"]
    asked = con.execute(
        "select distinct recent_k from figure_trends where env = 'loud' and figure = ?"
        " and subject = ? and reference_n = 30 and not confirmed",
        list(SPEEDUP),
    ).fetchall()
    assert asked == [(k_max,)]


def test_a_standing_regression_stays_reported_against_its_own_reference(con, history):
    """A 5 % step on night 30 that stays: once said, the regression is said every night,
    since night 30, though tonight's test alone has taken the changed runs into its
    reference; it is "new" once."""
    rows = con.execute(
        "select verdict, test_verdict, change_since, first_night, standing, reference_median"
        " from figure_trends where env = 'standing' and figure = ? and subject = ?"
        " order by started_at",
        list(SPEEDUP),
    ).fetchall()
    assert len(rows) == LONG_NIGHTS
    said = [i for i, r in enumerate(rows) if r[0] == "regression"]
    assert said and said[0] <= 33 and said == list(range(said[0], LONG_NIGHTS)), said
    # Tonight's test alone no longer sees it: its reference is the changed runs now.
    assert rows[-1][1] != "regression" and rows[-1][4]
    night_30 = con.execute(
        "select started_at from figure_trends where run_id = ? and figure = ? and subject = ?",
        [history[1]["standing"][30], *SPEEDUP],
    ).fetchone()[0]
    assert {r[2] for r in rows[said[0] :]} == {night_30}
    assert [r[3] for r in rows[said[0] :]] == [True] + [False] * (len(said) - 1)
    # The evidence is against the reference before the change (10), not the changed level.
    assert 9.8 < rows[-1][5] < 10.2
    changes = con.execute(
        "select verdict, first_night, change_since from changes where env = 'standing'"
        " and figure = ? and subject = ?",
        list(SPEEDUP),
    ).fetchone()
    assert changes == ("regression", False, night_30)
    evidence, counts = con.execute(
        "select r.evidence, v.standing_regressions from report_changes as r"
        " join verdicts as v using (env, run_id) where r.env = 'standing' and r.figure = ?"
        " and r.subject = ?",
        list(SPEEDUP),
    ).fetchone()
    assert evidence.startswith(f"standing since {night_30:%Y-%m-%d} (said by the ") and counts >= 1


def test_a_series_declared_the_new_normal_is_judged_again_from_it(con, history):
    """Re-baselined on night 45 (the environments file's `rebaseline:`): the standing
    regression is no longer said; the series is 'new' until verdict_min_baseline runs of the
    new level are in, then judged against them; who, when and why are in the warehouse."""
    over_time = verdicts_over_time(con, "rebased", *SPEEDUP)
    first = project_vars()["verdict_min_baseline"]
    assert "regression" in over_time[30:45] and over_time[44] == "regression", over_time[30:45]
    assert set(over_time[45 : 45 + first]) == {"new"}, over_time[45:]
    assert not set(ALARMS) & set(over_time[45:]), over_time[45:]
    row = con.execute(
        "select r.declared_by, r.why, r.declared, t.started_at from rebaselines as r"
        " join runs as t on t.run_id = r.run_id and t.env = r.env where r.env = 'rebased'"
    ).fetchall()
    assert len(row) == 1  # landed with every run since, counted once
    by, why, declared, started = row[0]
    assert by == REBASELINE["declared_by"] and why == REBASELINE["why"]
    assert declared == REBASELINE["declared"] and started.date() == declared


def test_a_change_that_returns_is_no_longer_reported(con):
    """The same step, back to its old level on night 50: the regression ends."""
    over_time = verdicts_over_time(con, "returned", *SPEEDUP)
    assert "regression" in over_time[30:50]
    assert "regression" not in over_time[56:], over_time[50:]


def test_a_standing_change_followed_night_by_night_equals_one_build(history, tmp_path):
    """The nightly path (one update per night, the change followed on from the state the
    last update kept) gives the standing stories the verdicts of one build from the lake."""
    from test_warehouse_incremental import _same

    root, runs = history
    stepped = tmp_path / "stepped.duckdb"
    for night in (29, 31, 32, 33, 34, 45, 50, 51, 60):
        warehouse.update(Lake.at(root / "lake"), stepped, until_run_id=runs["standing"][night])
    assert warehouse.update(Lake.at(root / "lake"), stepped).mode == "incremental"
    query = (
        "select env, run_id, figure, subject, verdict, test_verdict, change_since, first_night,"
        " standing, reference_median, p_value, hold_reference, verdict_test, scan_score,"
        " hold_test from figure_trends"
        " where env in ('standing', 'returned', 'rebased', 'step5', 'slow-step') order by all"
    )
    with open_warehouse(root / "w.duckdb") as whole, open_warehouse(stepped) as nightly:
        want, got = whole.execute(query).fetchall(), nightly.execute(query).fetchall()
    assert len(got) == len(want) > 0
    for mine, theirs in zip(got, want, strict=True):
        assert _same(mine, theirs), (mine, theirs)


def test_a_single_outlier_run_is_no_regression(con):
    assert not {"regression", "improvement"} & set(verdicts_over_time(con, "outlier", *SPEEDUP))
    assert verdict(con, "outlier", *SPEEDUP) == "steady"
    assert verdict(con, "outlier-tonight", *SPEEDUP) == "unconfirmed"
    assert (
        con.execute("select verdict from verdicts where env = 'outlier-tonight'").fetchone()[0]
        == "unconfirmed"
    )


def test_a_profile_switch_starts_a_new_series_with_a_marker(con, history):
    row = con.execute(
        "select verdict, series_started, baseline_n, previous_profile, profile from changes"
        " where env = 'switch' and figure = ? and subject = ?",
        list(SPEEDUP),
    ).fetchone()
    # Compared with nothing: the four quick runs are another series (twice the speedup here).
    assert row == ("new", True, 0, "quick", "nightly")
    assert con.execute(
        "select regressions, new_series = figures from verdicts where env = 'switch'"
    ).fetchone() == (0, True)
    result = CliRunner().invoke(
        app,
        [
            "trend",
            "--env",
            "switch",
            "--figure",
            SPEEDUP[0],
            "--subject",
            SPEEDUP[1],
            "--warehouse",
            str(history[0] / "w.duckdb"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "new series (quick → nightly, settings nightly/" in result.output
    assert "latest run: new" in result.output


def test_a_crashed_runs_files_are_excluded_and_listed(con, history):
    crashed = history[1]["crashed"][3]
    for table in ("figures", "figure_trends", "runs"):
        assert (
            con.execute(f"select count(*) from {table} where run_id = ?", [crashed]).fetchone()[0]
            == 0
        )
    assert con.execute("select count(*) from figures where env = 'crashed'").fetchone()[0] > 0
    rows = con.execute("select env, run_id, tables, why from crashed_runs").fetchall()
    assert [(r[0], r[1]) for r in rows] == [("crashed", crashed)]
    assert rows[0][2] == ["benchmark", "fingerprint"] and "later run" in rows[0][3]


def test_an_upgrade_is_flagged_not_called_a_regression(con):
    assert verdict(con, "upgrade", *RPS) == "environment changed"
    assert verdict(con, "upgrade", *SPEEDUP) == "environment changed"
    changed = con.execute(
        "select count(*) from figure_trends where env = 'upgrade' and environment_changed"
        " and figure = 'bench_rps' and subject = ?",
        [RPS[1]],
    ).fetchone()[0]
    assert changed == 1
    # The absolute series restarts at the change: no change point is claimed across it.
    assert series_change_points(con, "upgrade", *RPS) == []


def test_a_step_is_located_at_the_right_run(con, history):
    points = series_change_points(con, "located", *SPEEDUP)
    assert [p.run_id for p in points] == [history[1]["located"][15]]
    assert 0.15 < points[0].change_share < 0.25


def test_changes_exits_non_zero_on_a_regression_and_reports_lead_with_it(history, tmp_path):
    root, _ = history
    runner = CliRunner()
    result = runner.invoke(app, ["changes", "--warehouse", str(root / "w.duckdb")])
    assert result.exit_code == 1, result.output
    assert "regression" in result.output and "crashed" in result.output
    quiet = runner.invoke(app, ["changes", "--env", "quiet", "--warehouse", str(root / "w.duckdb")])
    assert quiet.exit_code == 0, quiet.output
    render_reports(root / "w.duckdb", tmp_path)
    first_screen = "\n".join((tmp_path / "step.md").read_text().splitlines()[:12])
    assert "regression" in first_screen and "pipeline_speedup" in first_screen
    assert "charts/step-trend-pipeline_speedup" in first_screen
    # Which test said each change, in the report's row and in `changes`' evidence.
    assert "several-run test: " in first_screen
    slow = runner.invoke(
        app, ["changes", "--env", "slow-step", "--warehouse", str(root / "w.duckdb")]
    )
    assert "regression" in slow.output, slow.output
    assert "scan since" in slow.output or "said by the scan test" in slow.output, slow.output
    render_reports(root / "w.duckdb", tmp_path)
    slow_screen = "\n".join((tmp_path / "slow-step.md").read_text().splitlines()[:12])
    assert "scan since" in slow_screen or "said by the scan test" in slow_screen, slow_screen
    index = "\n".join((tmp_path / "index.md").read_text().splitlines()[:25])
    assert "regression" in index and "pipeline_speedup" in index and "crashed" in index
    comparison = (tmp_path / "comparison.md").read_text()
    assert "| step | **regression** (1 regression) |" in comparison


def test_comparison_report_holds_every_environment(tmp_path):
    for day in range(2):
        for env, partner in (("a", None), ("a-fwd", "a"), ("b", None)):
            land_run(tmp_path / "lake", env, day, 10.0, 1e5, same_server_as=partner)
    build(tmp_path).close()
    render_reports(tmp_path / "w.duckdb", tmp_path / "out")
    text = (tmp_path / "out" / "comparison.md").read_text()
    header = next(
        line for line in text.splitlines() if line.startswith("| figure | name | unit | subject |")
    )
    # Pairs sit together: a, then its forwarded twin, then b.
    assert header.split("|")[5:8] == [" a ", " a-fwd ", " b "]
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
        app,
        [
            "trend",
            "--env",
            "a",
            "--figure",
            "pipeline_speedup",
            "--warehouse",
            str(tmp_path / "w.duckdb"),
        ],
    )
    assert result.exit_code == 2 and "--subject" in result.output and "set c1 3B" in result.output
    result = runner.invoke(
        app, ["changes", "--env", "nowhere", "--warehouse", str(tmp_path / "w.duckdb")]
    )
    assert result.exit_code == 2 and "--env" in result.output


def test_changes_speak_only_of_the_latest_run(tmp_path):
    """A family missing tonight leaves no verdict from an older night under 'latest run'."""
    for day in range(5):
        land_run(tmp_path / "lake", "a", day, 10.0, 1e5)
    tonight = new_run(tmp_path / "lake", "a", START + timedelta(days=5))  # no benchmark
    tonight.write(
        "runs",
        [
            {
                "profile": "nightly",
                "started_at": tonight.at,
                "status": "partial",
                "mode": "scratch",
            }
        ],
    )
    con = build(tmp_path)
    assert con.execute("select count(*) from changes").fetchone()[0] == 0
    assert con.execute("select verdict from verdicts").fetchone()[0] == "not judged"


def test_the_verdict_sentence_follows_the_dbt_vars(history, tmp_path):
    """'new' and 'noisy' are said with the settings that made them: the verdicts view re-run
    with other vars on a copy of the history's warehouse changes the report's first line."""
    import json

    from yardstick.storage import dbt

    defaults = project_vars()
    copy = tmp_path / "w.duckdb"
    shutil.copy(history[0] / "w.duckdb", copy)
    render_reports(copy, tmp_path / "before")
    first_line = (tmp_path / "before" / "quiet.md").read_text()
    assert f"without {defaults['verdict_min_baseline']} comparable runs yet" in first_line
    assert f"too noisy to see a {defaults['verdict_min_change_share'] * 100:g} % change" in (
        first_line
    )
    other = {"verdict_min_baseline": 7, "verdict_min_change_share": 0.08}
    assert other["verdict_min_baseline"] != defaults["verdict_min_baseline"]
    dbt.run(copy, ["run", "--select", "verdicts", "--vars", json.dumps(other)])
    render_reports(copy, tmp_path / "after")
    first_line = (tmp_path / "after" / "quiet.md").read_text()
    assert "without 7 comparable runs yet" in first_line
    assert "too noisy to see a 8 % change" in first_line


@pytest.mark.server_agnostic  # the Prefect server only: no Redis server is read
def test_a_regression_is_announced_as_a_prefect_event(history, prefect_server):
    """The nightly flow's announce step emits one event per environment; read back through
    Prefect's API: the regression's figure and size are in the payload."""
    import json
    import time

    from prefect import flow
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter

    from yardstick.flows.announce import announce_verdicts

    step_run = history[1]["step"][-1]
    # The environments file's optional `notify:` block: a webhook on loopback here.
    received: list[bytes] = []
    hook = _webhook(received)
    CustomWebhookNotificationBlock(
        name="yardstick",
        url=f"http://127.0.0.1:{hook.server_port}/hook",
        json_data={"text": "{{subject}}\n{{body}}"},
        allow_private_urls=True,
    ).save("yardstick-test-hook", overwrite=True)

    @flow
    def tonight() -> list[str]:
        return announce_verdicts(
            str(history[0] / "w.duckdb"),
            step_run,
            {"block": "custom-webhook/yardstick-test-hook", "verdicts": ["regression"]},
        )

    try:
        assert tonight() == ["yardstick.regression"]
    finally:
        hook.shutdown()
    assert len(received) == 1
    text = json.loads(received[0])["text"]
    assert text.startswith("redis-yardstick: regression on step")
    assert "regression: pipeline_speedup [set c1 3B]" in text
    deadline = time.monotonic() + 30
    with get_client(sync_client=True) as client:
        while True:  # the server persists events in batches
            events = client.read_events(
                EventFilter(event=EventNameFilter(name=["yardstick.regression"])), limit=50
            ).events
            mine = [e for e in events if e.payload.get("run_id") == step_run]
            if mine or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert len(mine) == 1
    event = mine[0]
    assert event.resource.id == "yardstick.environment.step"
    moved = {(f["figure"], f["verdict"]): f for f in event.payload["moved"]}
    speedup = moved[("pipeline_speedup", "regression")]
    assert -30 < speedup["change_pct"] < -10 and speedup["noise_band_pct"] > 0
    # The test that said it, in the payload and first in its sentence.
    assert speedup["test"] == "several-run" and speedup["evidence"].startswith("several-run test")
    assert event.payload["regressions"] == 1
    # The README's automation would fire on it.
    import fnmatch

    import yaml
    from prefect.events.schemas.automations import AutomationCore

    example = Path(__file__).parents[1] / "examples" / "regression-automation.yaml"
    automation = AutomationCore.model_validate(yaml.safe_load(example.read_text()))
    assert event.event in automation.trigger.expect
    pattern = automation.trigger.match.root["prefect.resource.id"]
    assert fnmatch.fnmatch(event.resource.id, pattern)


def _webhook(received: list[bytes]):
    """A loopback HTTP server that keeps every POST body; serves in a thread."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
