"""Charts: valid SVG files beside the report, linked from it, skipped when their data is absent."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lakes
import pytest

from yardstick.reports.charts import render_charts
from yardstick.reports.render import render_reports
from yardstick.storage import warehouse

FIRST_NIGHT = datetime(2025, 3, 1, 2, 0, tzinfo=UTC)
NIGHTS = 12
STEP_NIGHT = 7  # from this night on, the client round trip is 20 % longer
UPGRADE_NIGHT = 10  # from this night on, Redis 7.4.1 instead of 7.2.4
SERVER_USEC_PER_PING = 1.5


def _land(
    lake_dir: Path,
    env: str,
    at: datetime,
    *,
    rtt_us: float,
    version: str,
    benchmark: bool,
    profile: str = "nightly",
    rng: random.Random,
) -> str:
    """Land one run of `env` as the flows do: a file per table, all with the same run id."""
    run = lakes.new_run(lake_dir, env, at, lakes.stable_run_id(at, env))
    lakes.runs_row(
        run,
        profile,
        duration_s=60.0,
        host_group="local",
        tool_version="test",
    )
    lakes.steps(run, ["round_trip"], finished_at=at, duration_s=5.0, window_s=5.0)
    if profile == "collect":
        return run.run_id
    lakes.fingerprint(
        run,
        version,
        cores=8,
        facts={
            ("probe", "mode"): "scratch",
            ("prober", "cpu_model"): "Test CPU @ 3.0GHz",
            ("prober", "load_1m"): "0.50",
        },
    )
    lakes.ping(run, rtt_us=rtt_us, rng=rng, server_usec_per_ping=SERVER_USEC_PER_PING)
    if benchmark:
        lakes.benchmark(
            run,
            [
                lakes.cell(
                    test,
                    clients,
                    pipeline,
                    40000.0 * pipeline * (1 + clients / 10) * (1 + rng.uniform(-spread, spread)),
                    repetition=rep,
                    payload_bytes=64,
                    requests=100000,
                    p50_ms=0.1 * clients,
                    p99_ms=0.3 * clients,
                    avg_ms=0.12 * clients,
                    started_at=at,
                    elapsed_s=1.0,
                    host_busy_share=0.5,
                    tool_version="test",
                )
                for test in ("SET", "GET")
                for clients in (1, 50)
                for pipeline in (1, 16)
                # One cell spreads widely between repetitions: it must be hatched.
                for spread in [0.4 if (test, clients, pipeline) == ("GET", 1, 1) else 0.02]
                for rep in range(3)
            ],
        )
    return run.run_id


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A warehouse of 12 nightly runs of `steady` (a 20 % step, an upgrade), one run of
    `single` without benchmark, and a collection run after the last nightly of `steady`."""
    root = tmp_path_factory.mktemp("charts")
    lake_dir, rng = root / "lake", random.Random(7)
    latest: dict[str, str] = {}
    for night in range(NIGHTS):
        at = FIRST_NIGHT + timedelta(days=night)
        latest["steady"] = _land(
            lake_dir,
            "steady",
            at,
            rtt_us=60.0 * (1.2 if night >= STEP_NIGHT else 1.0),
            version="7.4.1" if night >= UPGRADE_NIGHT else "7.2.4",
            benchmark=True,
            rng=rng,
        )
    last = FIRST_NIGHT + timedelta(days=NIGHTS - 1)
    latest["single"] = _land(
        lake_dir, "single", last, rtt_us=200.0, version="7.2.4", benchmark=False, rng=rng
    )
    _land(
        lake_dir,
        "steady",
        last + timedelta(hours=3),
        rtt_us=0,
        version="",
        benchmark=False,
        profile="collect",
        rng=rng,
    )
    return warehouse.build(lake_dir, root / "warehouse.duckdb"), latest


def _is_svg(path: Path) -> bool:
    return ET.parse(path).getroot().tag.endswith("svg")


def test_render_charts_writes_three_valid_svgs_for_a_run_with_history(built, tmp_path):
    path, latest = built
    con = warehouse.connect_read_only(path)
    try:
        run = con.execute(
            "select * from stg_runs where run_id = ? and env = 'steady'", [latest["steady"]]
        ).fetchone()
        names = [d[0] for d in con.description]
        charts = render_charts(con, tmp_path, dict(zip(names, run, strict=True)))
    finally:
        con.close()
    assert [c["file"] for c in charts] == [
        "charts/steady-trends.svg",
        "charts/steady-rtt.svg",
        "charts/steady-throughput.svg",
    ]
    for chart in charts:
        assert chart["title"]
        assert _is_svg(tmp_path / chart["file"])
    trends = (tmp_path / "charts/steady-trends.svg").read_text()
    for figure in ("client_over_server_ping", "pipeline_speedup", "concurrency_speedup"):
        assert figure in trends
    # The same data gives the same bytes: no date, salted ids.
    con = warehouse.connect_read_only(path)
    try:
        render_charts(con, tmp_path / "again", dict(zip(names, run, strict=True)))
    finally:
        con.close()
    assert (tmp_path / "again/charts/steady-trends.svg").read_text() == trends


def test_the_step_is_a_change_point_the_trend_chart_draws(built):
    from yardstick.reports.changepoints import series_change_points

    path, _ = built
    con = warehouse.connect_read_only(path)
    try:
        points = series_change_points(con, "steady", "client_over_server_ping")
        step_at = FIRST_NIGHT + timedelta(days=STEP_NIGHT)
        assert [p.started_at for p in points] == [step_at]
        assert points[0].change_share == pytest.approx(0.2, abs=0.03)
    finally:
        con.close()


def test_reports_link_their_charts_and_skip_charts_without_data(built, tmp_path):
    path, latest = built
    # A chart an earlier run left behind, which this run has no data for.
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts/single-throughput.svg").write_text("<svg/>")
    written = render_reports(path, tmp_path)
    steady = written["steady"].read_text()
    # The latest full run is reported, not the collection that landed after it.
    assert latest["steady"] in steady
    assert "## Charts" in steady
    for kind in ("trends", "rtt", "throughput"):
        assert f"(charts/steady-{kind}.svg)" in steady
        assert _is_svg(tmp_path / f"charts/steady-{kind}.svg")
    single = written["single"].read_text()
    # One run and no benchmark: only the round-trip distribution has data.
    assert "(charts/single-rtt.svg)" in single
    assert "single-trends" not in single and "single-throughput" not in single
    names = sorted(p.name for p in (tmp_path / "charts").iterdir())
    # The verdict's own charts: one per figure that moved tonight, each linked and valid.
    moved = [name for name in names if name.startswith("steady-trend-")]
    assert moved and all(f"(charts/{name})" in steady for name in moved)
    assert all(_is_svg(tmp_path / "charts" / name) for name in moved)
    assert [name for name in names if name not in moved] == [
        "single-rtt.svg",
        "steady-rtt.svg",
        "steady-throughput.svg",
        "steady-trends.svg",
    ]
