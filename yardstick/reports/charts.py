"""SVG charts beside an environment's report: its key ratios over time with change points,
the client round-trip distribution and the throughput matrix of the reported run."""

from __future__ import annotations

import glob
import math
import os
import re
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import matplotlib
from matplotlib import cycler

# No display anywhere the flows run; Agg also keeps pyplot, if anyone imports it, headless.
matplotlib.use("Agg")

from matplotlib.dates import AutoDateLocator, ConciseDateFormatter  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402 - after the backend is chosen
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    EngFormatter,
    FuncFormatter,
    LogLocator,
    NullFormatter,
)

from yardstick.reports.changepoints import series_change_points  # noqa: E402
from yardstick.reports.labels import figure_label, unit_label  # noqa: E402

# Figures with one series per subject (benchmark cells): more lines than this are unreadable.
MAX_SUBJECTS = 4
MIN_RUNS = 2
MAX_DOTS = 120

# Text stays text (small files), and ids are salted so the same data gives the same bytes;
# series colours leave red to the change points.
_RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "yardstick",
    "font.size": 9,
    "axes.prop_cycle": cycler(color=["tab:blue", "tab:orange", "tab:green", "tab:purple"]),
}
# Without a Date the SVG does not change when nothing it shows changed.
_METADATA = {"Date": None}


def render_charts(con: duckdb.DuckDBPyConnection, out_dir: Path, run: dict) -> list[dict]:
    """Write the charts of one environment's run under <out_dir>/charts; title and file each."""
    out_dir = Path(out_dir)
    charts = []
    for kind, title, draw in (
        (
            "trends",
            "Key ratios over time (change points and environment changes marked)",
            _trend_chart,
        ),
        ("rtt", "Client round trip of this run (all windows pooled)", _rtt_chart),
        (
            "throughput",
            "Throughput matrix of this run (min to max of the repetitions)",
            _throughput_chart,
        ),
    ):
        relative = f"charts/{run['env']}-{kind}.svg"
        with matplotlib.rc_context(_RC):
            figure = draw(con, run)
        if figure is None:
            # No data for it in this run; an older run's chart left here would mislead.
            (out_dir / relative).unlink(missing_ok=True)
            continue
        with matplotlib.rc_context(_RC):
            _save(figure, out_dir / relative)
        charts.append({"title": title, "file": relative})
    return charts


# Verdicts whose figure gets a chart of its own, linked from the report's first lines.
MOVED = ("regression", "improvement", "changed", "unconfirmed")
MAX_VERDICT_CHARTS = 12


def verdict_chart_file(env: str, figure: str, subject: str) -> str:
    """Where the trend chart of one judged series lives, relative to the reports folder."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", subject).strip("_")
    return f"charts/{env}-trend-{figure}{'-' + slug if slug else ''}.svg"


def render_verdict_charts(
    con: duckdb.DuckDBPyConnection, out_dir: Path, run: dict, moved: list[dict]
) -> dict[tuple[str, str], str]:
    """One trend chart per moved figure (at most MAX_VERDICT_CHARTS, in the given order):
    (figure, subject) -> file. Charts of this environment that no longer apply are removed."""
    out_dir = Path(out_dir)
    written: dict[tuple[str, str], str] = {}
    for row in [r for r in moved if r["verdict"] in MOVED][:MAX_VERDICT_CHARTS]:
        relative = verdict_chart_file(run["env"], row["figure"], row["subject"])
        with matplotlib.rc_context(_RC):
            figure = _verdict_chart(con, run, row)
            _save(figure, out_dir / relative)
        written[(row["figure"], row["subject"])] = relative
    keep = {out_dir / name for name in written.values()}
    for old in (out_dir / "charts").glob(f"{glob.escape(run['env'])}-trend-*.svg"):
        if old not in keep:
            old.unlink(missing_ok=True)  # a chart of a figure no longer moved would mislead
    return written


def _verdict_chart(con: duckdb.DuckDBPyConnection, run: dict, row: dict) -> Figure:
    """One series over time: each run's judged value, its series' rolling median, tonight's
    baseline and noise band, and markers where the series or the environment changed."""
    env, figure, subject = run["env"], row["figure"], row["subject"]
    points = con.execute(
        "select started_at, judged_value, rolling_median, series, series_started,"
        " environment_changed, profile from figure_trends"
        " where env = ? and figure = ? and subject = ? and started_at <= ?"
        " order by started_at, run_id",
        [env, figure, subject, run["started_at"]],
    ).fetchall()
    fig = _figure(3.3, top_in=0.95)
    ax = fig.subplots()
    locator = AutoDateLocator(maxticks=8)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    if points and len({p[0] for p in points}) == 1:
        # One run so far: a day around it, or the date locator finds no interval to tick.
        ax.set_xlim(points[0][0] - timedelta(hours=12), points[0][0] + timedelta(hours=12))
    latest_series = points[-1][3] if points else None
    for series in dict.fromkeys(p[3] for p in points):
        mine = [p for p in points if p[3] == series]
        current = series == latest_series
        ax.plot(
            [p[0] for p in mine],
            [p[1] for p in mine],
            marker="." if len(mine) <= MAX_DOTS else None,
            markersize=3,
            linewidth=0.8,
            color="tab:blue" if current else "0.6",
            label=f"{mine[-1][6] or 'unknown'} ({series})" if not current else "this series",
        )
        if current:
            ax.plot(
                [p[0] for p in mine],
                [p[2] for p in mine],
                linewidth=1.6,
                alpha=0.5,
                color="tab:blue",
                label="rolling median (7 runs)",
            )
    base, band = row.get("baseline_median"), row.get("noise_band")
    if base is not None and points:
        ax.axhline(base, color="tab:green", linewidth=1.0, label="baseline (median of 30 runs)")
        if band:
            ax.axhspan(base - band, base + band, color="tab:green", alpha=0.12, label="noise band")
    for at, _v, _r, _s, started, changed, _p in points:
        if started:
            ax.axvline(at, color="tab:purple", linestyle="-.", linewidth=1.2)
        if changed:
            ax.axvline(at, color="0.45", linestyle=":", linewidth=1.4)
    if points:
        ax.plot(
            [points[-1][0]],
            [points[-1][1]],
            "o",
            markersize=7,
            markerfacecolor="none",
            color="tab:red",
            label=f"tonight: {row['verdict']}",
        )
    share = row.get("change_share")
    described, unit = _catalog(con).get(figure, (figure, row.get("unit") or ""))
    title = f"{described}{f' [{subject}]' if subject else ''} on {env}"
    if share is not None:
        title += f": {share * 100:+.1f} % against the baseline"
    ax.set_title(title, loc="left", fontsize=9)
    # The identifier stays in the SVG (the panel's id), the title is for people.
    ax.set_gid(f"figure-{figure}")
    _value_axis(ax, unit)
    ax.grid(True, axis="y", alpha=0.3)
    handles, _labels = ax.get_legend_handles_labels()
    handles += [
        Line2D(
            [], [], color="tab:purple", linestyle="-.", label="new series (profile or settings)"
        ),
        Line2D([], [], color="0.45", linestyle=":", label="environment changed"),
    ]
    fig.legend(handles=handles, loc="upper center", ncols=3, fontsize=6.5, frameon=False)
    return fig


def _figure(
    height_in: float, *, left_in: float = 0.8, top_in: float = 0.35, bottom_in: float = 0.55
) -> Figure:
    """An 8-inch-wide figure with fixed margins (a layout engine would double the time)."""
    fig = Figure(figsize=(8, height_in))
    fig.subplots_adjust(
        left=left_in / 8,
        right=1 - 0.2 / 8,
        top=1 - top_in / height_in,
        bottom=bottom_in / height_in,
        hspace=0.45,
    )
    return fig


def _save(figure: Figure, path: Path) -> None:
    """Write an SVG atomically, so a reader never sees half a chart."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    figure.savefig(tmp, format="svg", metadata=_METADATA)
    os.replace(tmp, path)


def _catalog(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, str]]:
    """figure -> (label, unit) from the figure catalog: what titles and axes say."""
    return {
        figure: (label or figure_label(figure), unit or "")
        for figure, label, unit in con.execute(
            "select figure, label, unit from figure_catalog"
        ).fetchall()
    }


# Labelled ticks in each decade, by how many decades the data spans: as many as fit 8 inches
# at 9 pt, so labels cannot run together as every minor tick's did (5000600070008000900).
_LOG_SUBS = ((0.7, tuple(range(1, 10))), (1.5, (1, 2, 3, 5, 7)), (3.0, (1, 2, 5)))


def _log_axis(axis, formatter, low: float, high: float) -> None:
    """A readable log axis: major ticks labelled, as dense as the span allows; minor ticks
    drawn but never labelled."""
    decades = math.log10(high / low) if low > 0 and high > low else 1.0
    subs = next((subs for most, subs in _LOG_SUBS if decades <= most), (1,))
    axis.set_major_locator(LogLocator(base=10, subs=[float(s) for s in subs]))
    axis.set_major_formatter(formatter)
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    axis.set_minor_formatter(NullFormatter())


def _value_axis(ax, unit: str) -> None:
    """Label a value axis with its catalog unit; shares read as percent on the ticks."""
    if unit == "share":
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value * 100:.4g} %"))
    else:
        ax.set_ylabel(unit_label(unit))


def trend_figures(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The ratios the trend chart shows, top panel first: the figure catalog's `trend_chart`
    column (yardstick/sql/seeds/figure_catalog.csv). They transfer, so a move is the signal."""
    return [
        r[0]
        for r in con.execute(
            "select figure from figure_catalog where trend_chart is not null"
            " order by trend_chart, figure"
        ).fetchall()
    ]


def _trend_series(
    con: duckdb.DuckDBPyConnection, env: str, until: datetime, figures: list[str]
) -> list[tuple[str, str, str]]:
    """(figure, subject, unit) of each series of `figures` in `env` up to `until`."""
    rows = con.execute(
        "select figure, subject, any_value(unit), count(*) as points from figure_trends"
        " where env = ? and started_at <= ? and figure in ?"
        " group by figure, subject order by figure, points desc, subject",
        [env, until, figures],
    ).fetchall()
    kept: dict[str, list[tuple[str, str, str]]] = {}
    for figure, subject, unit, _points in rows:
        # The longest histories first: a cell measured once says nothing about a trend.
        if len(kept.setdefault(figure, [])) < MAX_SUBJECTS:
            kept[figure].append((figure, subject, unit))
    return [series for figure in figures for series in kept.get(figure, [])]


def _trend_chart(con: duckdb.DuckDBPyConnection, run: dict) -> Figure | None:
    """One panel per key ratio: value, rolling median, change points, environment changes."""
    env, until = run["env"], run["started_at"]
    figures = trend_figures(con)
    if not figures:
        return None
    runs = con.execute(
        "select count(distinct run_id) from figure_trends"
        " where env = ? and started_at <= ? and figure in ?",
        [env, until, figures],
    ).fetchone()[0]
    series = _trend_series(con, env, until, figures)
    if runs < MIN_RUNS or not series:
        return None
    changed = con.execute(
        "select started_at, redis_version from run_environment"
        " where env = ? and environment_changed and started_at <= ? order by started_at",
        [env, until],
    ).fetchall()
    # Where the profile or its settings changed: the points after are another series.
    switched = [
        r[0]
        for r in con.execute(
            "select distinct started_at from figure_trends where env = ? and series_started"
            " and started_at <= ? and figure in ? order by started_at",
            [env, until, figures],
        ).fetchall()
    ]
    panels = list(dict.fromkeys(figure for figure, _, _ in series))
    catalog = _catalog(con)
    fig = _figure(1.9 * len(panels) + 1.0, top_in=0.75, bottom_in=0.45)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    locator = AutoDateLocator(maxticks=8)
    axes[-1].xaxis.set_major_locator(locator)
    axes[-1].xaxis.set_major_formatter(ConciseDateFormatter(locator))
    for ax, panel in zip(axes, panels, strict=True):
        in_panel = [s for s in series if s[0] == panel]
        for figure, subject, _unit in in_panel:
            points = con.execute(
                "select started_at, value, rolling_median from figure_trends"
                " where env = ? and figure = ? and subject = ? and started_at <= ?"
                " order by started_at, run_id",
                [env, figure, subject, until],
            ).fetchall()
            at = [p[0] for p in points]
            line = ax.plot(
                at,
                [p[1] for p in points],
                # A dot per run while they can be told apart; a year of them is just ink.
                marker="." if len(points) <= MAX_DOTS else None,
                markersize=3,
                linewidth=0.8,
                label=subject or figure,
            )[0]
            if len(in_panel) == 1:
                # Several cells' medians on one panel would hide the points themselves.
                ax.plot(
                    at, [p[2] for p in points], linewidth=1.6, alpha=0.5, color=line.get_color()
                )
            for point in series_change_points(con, env, figure, subject):
                if point.started_at <= until:
                    ax.axvline(point.started_at, color="tab:red", linestyle="--", linewidth=1.2)
        described, unit = catalog.get(panel, (panel, in_panel[0][2]))
        ax.set_title(
            f"{described} ({unit_label(unit)})" if unit_label(unit) else described,
            loc="left",
            fontsize=9,
        )
        ax.set_gid(f"figure-{panel}")
        _value_axis(ax, unit)
        for at, _version in changed:
            ax.axvline(at, color="0.45", linestyle=":", linewidth=1.4)
        for at in switched:
            ax.axvline(at, color="tab:purple", linestyle="-.", linewidth=1.2)
        if len(in_panel) > 1:
            ax.legend(fontsize=7, loc="upper left", framealpha=0.8, ncols=len(in_panel))
        ax.grid(True, axis="y", alpha=0.3)
    # One key for the markers, written once above the panels.
    fig.legend(
        handles=[
            Line2D([], [], color="tab:blue", marker=".", linewidth=0.8, label="each run"),
            Line2D(
                [], [], color="tab:blue", linewidth=1.6, alpha=0.5, label="rolling median (7 runs)"
            ),
            Line2D([], [], color="tab:red", linestyle="--", label="change point"),
            Line2D(
                [],
                [],
                color="0.45",
                linestyle=":",
                linewidth=1.4,
                label="environment changed (version, CPU, cores, transport)",
            ),
            Line2D(
                [], [], color="tab:purple", linestyle="-.", label="new series (profile or settings)"
            ),
        ],
        loc="upper center",
        ncols=2,
        fontsize=7,
        frameon=False,
    )
    return fig


def _rtt_chart(con: duckdb.DuckDBPyConnection, run: dict) -> Figure | None:
    """Log-x histogram of every PING round trip of the run, with its p50 and p99."""
    key = [run["run_id"], run["env"]]
    buckets = con.execute(
        "select min(low_us), min(high_us), sum(count) from ping_histogram"
        " where run_id = ? and env = ? group by bucket order by bucket",
        key,
    ).fetchall()
    if not buckets:
        return None
    # The run's client percentiles, marked on the histogram: value and unit (the catalog's).
    lines = (
        ("rtt_client_p50_us", "p50", "tab:green"),
        ("rtt_client_p99_us", "p99", "tab:red"),
    )
    quantiles = {
        figure: (value, unit)
        for figure, value, unit in con.execute(
            "select figure, value, unit from figures where run_id = ? and env = ? and subject = ''"
            " and figure in ?",
            [*key, [figure for figure, _, _ in lines]],
        ).fetchall()
    }
    fig = _figure(3.2)
    ax = fig.subplots()
    ax.bar(
        [b[0] for b in buckets],
        [b[2] for b in buckets],
        width=[b[1] - b[0] for b in buckets],
        align="edge",
        color="tab:blue",
        alpha=0.8,
    )
    ax.set_xscale("log")
    # Plain µs on the ticks (60, 100), not powers of ten.
    plain = FuncFormatter(lambda value, _pos: f"{value:g}")
    _log_axis(ax.xaxis, plain, buckets[0][0], buckets[-1][1])
    catalog = _catalog(con)
    for figure, label, color in lines:
        value, unit = quantiles.get(figure, (None, None))
        if value is not None:
            described = catalog.get(figure, (label, unit))[0]
            ax.axvline(
                value,
                color=color,
                linestyle="--",
                linewidth=1.2,
                label=f"{described}: {value:.1f} {unit}",
            )
    unit = catalog.get("rtt_client_p50_us", ("", "µs"))[1]
    ax.set_xlabel(f"PING round trip seen by the client ({unit}, log scale)")
    ax.set_ylabel("PINGs in the bucket")
    ax.set_title(
        f"Every PING round trip of this run, windows pooled ({run['env']}, run {run['run_id']})",
        loc="left",
        fontsize=9,
    )
    if quantiles:
        ax.legend(fontsize=7, framealpha=0.85, loc="upper left")
    return fig


def _throughput_chart(con: duckdb.DuckDBPyConnection, run: dict) -> Figure | None:
    """Requests per second of each benchmark cell, min to max of its repetitions."""
    cells = con.execute(
        "select cell, rps, coalesce(rps_min, rps), coalesce(rps_max, rps), coalesce(noisy, false)"
        " from report_throughput_matrix where run_id = ? and env = ? and rps > 0"
        " order by cell desc",  # barh draws bottom-up: reversed, the chart reads a-z
        [run["run_id"], run["env"]],
    ).fetchall()
    if not cells:
        return None
    # Room on the left for the longest cell name at 7 pt (about 0.06 in a character).
    longest = max(len(c[0]) for c in cells)
    fig = _figure(0.28 * len(cells) + 1.0, left_in=0.25 + 0.06 * longest)
    ax = fig.subplots()
    rps = [c[1] for c in cells]
    bars = ax.barh(
        [c[0] for c in cells],
        rps,
        xerr=[
            [r - c[2] for r, c in zip(rps, cells, strict=True)],
            [c[3] - r for r, c in zip(rps, cells, strict=True)],
        ],
        color="tab:blue",
        edgecolor="white",
        alpha=0.85,
        ecolor="0.2",
        capsize=2,
    )
    for bar, cell in zip(bars, cells, strict=True):
        if cell[4]:
            # Repetitions spread over 10 % (stdev ÷ median): read this cell with care.
            bar.set_hatch("//")
    for bar, cell in zip(bars, cells, strict=True):
        ax.annotate(
            f"  {cell[1]:,.0f}",
            (cell[3], bar.get_y() + bar.get_height() / 2),
            va="center",
            fontsize=7,
        )
    ax.margins(x=0.12)  # room for the numbers right of the longest bar
    ax.set_xscale("log")
    _log_axis(ax.xaxis, EngFormatter(sep=" "), min(c[2] for c in cells), max(c[3] for c in cells))
    described, unit = _catalog(con).get("bench_rps", ("requests per second", "req/s"))
    ax.set_xlabel(
        f"{unit}: median of the repetitions, bar from min to max (log scale); hatched: noisy"
    )
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(f"{described} ({run['env']}, run {run['run_id']})", loc="left", fontsize=9)
    return fig
