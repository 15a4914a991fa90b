"""The `yardstick` command: run measurements, rebuild reports, read a figure's history."""

from __future__ import annotations

import sys
from datetime import date
from difflib import get_close_matches
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from yardstick.config import ConfigError, load_config
from yardstick.profiles import PROFILES

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()
err = Console(stderr=True)

LakeOpt = Annotated[Path, typer.Option("--lake", help="Lake directory (Parquet, append-only).")]
WarehouseOpt = Annotated[Path, typer.Option("--warehouse", help="DuckDB warehouse file.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Directory for markdown reports.")]


def fail(message: str, code: int = 2) -> None:
    """Print one error line and exit."""
    # Escaped: a name or path such as 'a[b]' must not be read as console markup.
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command()
def run(
    config: Annotated[
        Path | None, typer.Option("--config", help="Environments YAML; none = embedded Redis.")
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="Only these environments.")] = None,
    profile: Annotated[str, typer.Option(help="quick or nightly.")] = "nightly",
    lake: LakeOpt = Path("lake"),
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    out: OutOpt = Path("reports-out"),
    state_dir: Annotated[Path, typer.Option(help="Where Prefect keeps its state.")] = Path(
        ".yardstick"
    ),
) -> None:
    """Measure the environments (or an embedded scratch Redis), land, build, render."""
    if profile not in PROFILES:
        fail(f"--profile: unknown profile {profile!r} (choose {', '.join(sorted(PROFILES))})")
    # Validate before Prefect starts: a bad file or name lands nothing.
    from yardstick.flows.targets import EMBEDDED_NAME, select

    if config is not None:
        try:
            select(load_config(config).environments, env, str(config))
        except ConfigError as exc:
            fail(str(exc))
    for name in env or []:
        if config is None and name != EMBEDDED_NAME:
            fail(f"--env: no environment {name!r} without --config (known: {EMBEDDED_NAME})")
    from yardstick.runtime import configure_prefect

    configure_prefect(state_dir)
    from yardstick.flows.nightly import nightly  # Prefect reads its settings on import

    target = str(config) if config else "an embedded scratch Redis"
    with console.status(f"Measuring {target} (profile {profile})…"):
        state = nightly(
            config_path=str(config) if config else None, env_names=env or None,
            profile=profile, lake_dir=str(lake), warehouse_path=str(warehouse),
            out_dir=str(out), return_state=True,
        )
    summary = state.result(raise_on_failure=False)
    if isinstance(summary, BaseException):
        fail(f"run failed: {type(summary).__name__}: {summary}", code=1)
    _print_summary(summary)
    if summary.failed:
        raise typer.Exit(1)


def _print_summary(summary) -> None:
    """The end-of-run table: one line per environment."""
    table = Table(title=f"run {summary.run_id} ({summary.profile}, {summary.wall_s:.1f} s)")
    for column in ("environment", "mode", "status", "time", "report", "error"):
        table.add_column(column)
    for o in summary.outcomes:
        colour = {"ok": "green", "partial": "yellow"}.get(o.status, "red")
        table.add_row(
            o.env, o.mode, f"[{colour}]{o.status}[/]", f"{o.duration_s:.1f} s",
            escape(o.report or ""), escape(o.error or ""),
        )
    console.print(table)
    index = Path(summary.out_dir) / "index.md"
    console.print(f"index: {index}  warehouse: {summary.warehouse_path}")


@app.command()
def report(
    lake: LakeOpt = Path("lake"),
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    out: OutOpt = Path("reports-out"),
) -> None:
    """Rebuild the warehouse and every environment's latest report from the lake alone."""
    import duckdb

    from yardstick.reports.render import render_reports
    from yardstick.warehouse import build

    if not lake.is_dir():
        fail(f"{lake}: no lake here (run `yardstick run` first)")
    try:
        build(lake, warehouse)
    except (RuntimeError, duckdb.Error) as exc:
        # The previous warehouse is left as it was; say which file or model failed.
        fail(f"{lake}: warehouse not rebuilt: {str(exc).strip().splitlines()[0]}", code=1)
    written = render_reports(warehouse, out)
    console.print(f"{len(written)} report(s) in {out}; warehouse {warehouse}")


@app.command()
def trend(
    env: Annotated[str, typer.Option("--env", help="Environment name.")],
    figure: Annotated[str, typer.Option("--figure", help="Figure name, e.g. rtt_client_p99_us.")],
    since: Annotated[str | None, typer.Option(help="First day, YYYY-MM-DD.")] = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
) -> None:
    """Print a figure's history for one environment, oldest first."""
    from yardstick.reports.render import fmt
    from yardstick.warehouse import connect_read_only

    try:
        con = connect_read_only(warehouse)
    except FileNotFoundError as exc:
        fail(str(exc))
    envs = [r[0] for r in con.execute("select distinct env from stg_runs").fetchall()]
    figures = [r[0] for r in con.execute("select figure from figure_catalog").fetchall()]
    if env not in envs:
        fail(f"--env: no environment {env!r} in {warehouse} ({_close(env, envs)})")
    if figure not in figures:
        fail(f"--figure: no figure {figure!r} ({_close(figure, figures)})")
    try:
        since_day = date.fromisoformat(since) if since else date.min
    except ValueError:
        fail(f"--since: {since!r} is not a date (YYYY-MM-DD)")
    rows = con.execute(
        "select started_at, run_id, value, unit, nature, n, min_value, max_value, redis_version,"
        " environment_changed from figure_history"
        " where env = ? and figure = ? and started_at::date >= ? order by started_at",
        [env, figure, since_day],
    ).fetchall()
    if not rows:
        console.print(f"no history for {figure} on {env}" + (f" since {since}" if since else ""))
        return
    unit, nature = rows[0][3], rows[0][4]
    table = Table(title=f"{figure} on {env} ({unit}, {nature})")
    for column in ("started (UTC)", "run", "value", "n", "min", "max", "Redis", "note"):
        table.add_column(column)
    for started, run_id, value, _, _, n, lo, hi, version, changed in rows:
        # A run cut short (process killed) has figures but no runs row, hence no start time.
        when = f"{started:%Y-%m-%d %H:%M}" if started else "?"
        table.add_row(
            when, run_id, fmt(value, unit), str(n), fmt(lo, unit),
            fmt(hi, unit), version or "", "environment changed" if changed else "",
        )
    console.print(table)


def _close(name: str, choices: list[str]) -> str:
    """'did you mean …' text listing the closest names, or all of them when few."""
    close = get_close_matches(name, choices, n=3, cutoff=0.4)
    if close:
        return "did you mean: " + ", ".join(close)
    return "known: " + (", ".join(sorted(choices)[:10]) or "none")


def main() -> None:
    """Entry point for `python -m yardstick.cli`."""
    app(prog_name="yardstick")


if __name__ == "__main__":
    sys.exit(main())
