"""Charts and report layout: valid SVG files beside the report, linked from it, skipped when
their data is absent, titled with the catalog's descriptions, on log axes whose labels never run
together; a report's first screen answers "is tonight fine?" and the comparison page describes
each figure. One warehouse for all (a build costs seconds)."""

from __future__ import annotations

import io
import random
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lakes
import matplotlib
import pytest
from matplotlib.ticker import EngFormatter, FuncFormatter

from yardstick.reports import charts
from yardstick.reports.charts import render_charts
from yardstick.reports.labels import unit_label
from yardstick.reports.render import NATURE_LABEL, render_reports
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake

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
    with delta.batch(Lake.at(lake_dir), "chart nights"):  # one commit per table, not per run
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
    return warehouse.build(Lake.at(lake_dir), root / "warehouse.duckdb"), latest


def _is_svg(path: Path) -> bool:
    return ET.parse(path).getroot().tag.endswith("svg")


def test_render_charts_writes_three_valid_svgs_for_a_run_with_history(built, tmp_path):
    path, latest = built
    con = warehouse.connect_read_only(path)
    try:
        run = con.execute(
            "select * from runs where run_id = ? and env = 'steady'", [latest["steady"]]
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


# --- titles, axes and the report's first screen ---------------------------------------------

SVG = "{http://www.w3.org/2000/svg}"
# What a terminal or a preview pane shows before scrolling.
SCREEN_LINES = 25
# DejaVu Sans digits are 0.64 em wide; letters and spaces in tick labels are no wider on average.
EM_PER_CHAR = 0.65


@pytest.fixture(scope="module")
def rendered(built, tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """The reports of `built`, rendered once, and the figure catalog they name."""
    path, _ = built
    out = tmp_path_factory.mktemp("rendered")
    render_reports(path, out)
    con = warehouse.connect_read_only(path)
    try:
        cursor = con.execute("select * from figure_catalog")
        names = [d[0] for d in cursor.description]
        catalog = {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}
    finally:
        con.close()
    return out, catalog


def _texts(path: Path | io.BytesIO) -> list[str]:
    return [t.text or "" for t in ET.parse(path).getroot().iter(f"{SVG}text")]


def _assert_x_labels_apart(path: Path | io.BytesIO) -> list[str]:
    """Each x tick carries at most one label, and neighbouring labels (centred on their tick)
    leave room for each other's text: none run together. Returns the labels, left to right."""
    labels = []
    for group in ET.parse(path).getroot().iter(f"{SVG}g"):
        if re.fullmatch(r"xtick_\d+", group.get("id", "")):
            texts = list(group.iter(f"{SVG}text"))
            assert len(texts) <= 1
            for text in texts:
                size = float(re.search(r"font-size: ([\d.]+)px", text.get("style")).group(1))
                labels.append((float(text.get("x")), text.text, size))
    labels.sort()
    assert len(labels) >= 2, labels  # an axis needs two numbers to be read
    for (x1, text1, size1), (x2, text2, size2) in zip(labels, labels[1:], strict=False):
        room = EM_PER_CHAR * (len(text1) * size1 + len(text2) * size2) / 2
        assert x2 - x1 >= room, f"{text1!r} and {text2!r} run together: {labels}"
    return [text for _x, text, _size in labels]


@pytest.mark.parametrize(
    "low, high, formatter",
    [
        (45.0, 110.0, FuncFormatter(lambda v, _: f"{v:g}")),
        (50.0, 9000.0, FuncFormatter(lambda v, _: f"{v:g}")),  # was 5000600070008000900
        (40.0, 250000.0, FuncFormatter(lambda v, _: f"{v:g}")),
        (30000.0, 4e6, EngFormatter(sep=" ")),
    ],
)
def test_a_log_axis_labels_its_major_ticks_only_and_they_never_touch(low, high, formatter):
    with matplotlib.rc_context(charts._RC):
        fig = charts._figure(3.2)
        ax = fig.subplots()
        ax.bar([low, high / 2], [1, 2], width=[low * 0.1, high / 2], align="edge")
        ax.set_xscale("log")
        charts._log_axis(ax.xaxis, formatter, low, high)
        svg = io.BytesIO()
        fig.savefig(svg, format="svg")
    # Minor ticks (where they are not majors already) are drawn without a label.
    assert {t.get_text() for t in ax.xaxis.get_minorticklabels()} <= {""}
    svg.seek(0)
    _assert_x_labels_apart(svg)


def test_charts_are_titled_with_the_catalogs_descriptions_and_units(rendered):
    out, catalog = rendered

    def described(figure: str) -> str:
        return catalog[figure]["label"]

    trends = _texts(out / "charts/steady-trends.svg")
    for figure in ("client_over_server_ping", "pipeline_speedup", "concurrency_speedup"):
        assert f"{described(figure)} ({unit_label(catalog[figure]['unit'])})" in trends
    # Identifiers stay out of what a reader sees (they remain the panels' SVG ids).
    assert not set(trends) & set(catalog)
    verdict = _texts(out / "charts/steady-trend-client_over_server_ping.svg")
    assert any(t.startswith(f"{described('client_over_server_ping')} on steady") for t in verdict)
    rtt = _texts(out / "charts/steady-rtt.svg")
    assert any(t.startswith("Every PING round trip of this run") for t in rtt)
    assert any(f"({catalog['rtt_client_p50_us']['unit']}, log scale)" in t for t in rtt)
    assert any(t.startswith(described("rtt_client_p99_us")) for t in rtt)  # the p99 line
    throughput = _texts(out / "charts/steady-throughput.svg")
    assert any(t.startswith(described("bench_rps")) for t in throughput)
    assert any(t.startswith(f"{catalog['bench_rps']['unit']}: median") for t in throughput)
    # Their log axes: plain numbers at major ticks, never run together.
    for labels in map(
        _assert_x_labels_apart,
        (out / "charts/steady-rtt.svg", out / "charts/steady-throughput.svg"),
    ):
        assert all(re.fullmatch(r"[\d.]+( [kM])?", label) for label in labels), labels


def _first_screen(text: str) -> list[str]:
    """The first SCREEN_LINES lines as a markdown viewer shows them: a <details> block is its
    one summary line until opened."""
    folded = re.sub(r"<details><summary>(.*?)</summary>.*?</details>", r"\1", text, flags=re.S)
    return folded.splitlines()[:SCREEN_LINES]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_the_first_screen_is_the_verdict_then_headline_figures_then_facts_and_steps(rendered):
    out, catalog = rendered
    text = (out / "steady.md").read_text()
    screen = _first_screen(text)
    verdict = next(i for i, line in enumerate(screen) if line.startswith("**Tonight's verdict"))
    header = screen.index("| figure | value | nature | name |")
    assert verdict < header
    rows = []
    for line in screen[header + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    # The round trip's absolutes, then the catalog's key ratios: described, unit, nature.
    named = [row[3].strip("`") for row in rows]
    assert named[:2] == ["rtt_client_p50_us", "server_ping_usec_per_call"]
    assert {"client_over_server_ping", "pipeline_speedup"} <= set(named)
    for description, value, nature, name in rows:
        entry = catalog[name.strip("`")]
        assert description == entry["label"]
        assert unit_label(entry["unit"]) in value and "None" not in value
        assert nature == NATURE_LABEL[entry["nature"]]
    # A figure of several benchmark cells shows their range, naming the cells at both ends;
    # the fixture's widely spread cell is counted as noisy.
    speedup = rows[named.index("pipeline_speedup")][1]
    assert re.fullmatch(
        r"[\d.]+× \(\w+ c\d+ 64B\) to [\d.]+× \(\w+ c\d+ 64B\) over 4 subjects.*", speedup
    )
    # Facts and steps come after the headline.
    lines = text.splitlines()
    headline_end = lines.index(screen[header + 1 + len(rows)])
    assert headline_end < lines.index("| fact | value |") < lines.index("## Steps")


def test_the_comparison_page_describes_each_figure_with_its_unit(rendered):
    out, catalog = rendered
    text = (out / "comparison.md").read_text()
    ratios, absolutes = text.split("## Ratios (transfer)")[1].split("## Absolutes")
    seen: dict[str, list[list[str]]] = {}
    for section, nature in ((ratios, "ratio"), (absolutes, "absolute")):
        for line in section.splitlines():
            cells = _cells(line)
            if line.startswith("|") and len(cells) > 3 and cells[1].startswith("`"):
                name = cells[1].strip("`")
                assert catalog[name]["nature"] == nature, name
                seen.setdefault(name, []).append(cells)
    assert {"client_over_server_ping", "pipeline_speedup", "rtt_client_p50_us"} <= set(seen)
    for name, rows in seen.items():
        entry = catalog[name]
        # Described on its first row, with the catalog's unit on every row.
        assert rows[0][0] == entry["label"] != name
        assert all(row[2] == unit_label(entry["unit"]) for row in rows), name
        assert all(row[0] == "" for row in rows[1:]), name
    assert "| figure | name | unit | subject | single | steady |" in text
    assert "They depend on:" in absolutes
