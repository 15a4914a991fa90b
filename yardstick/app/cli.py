"""The `yardstick` command: run measurements, rebuild reports, read a figure's history."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import date
from difflib import get_close_matches
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from yardstick import interrupt
from yardstick.settings.config import ConfigError, load_config
from yardstick.settings.profiles import PROFILES

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()
err = Console(stderr=True)

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
    lake: Annotated[
        str | None,
        typer.Option(
            "--lake", help="Lake: a folder or s3://bucket/prefix (default: the config's, ./lake)."
        ),
    ] = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    out: OutOpt = Path("reports-out"),
    state_dir: Annotated[Path, typer.Option(help="Where Prefect keeps its state.")] = Path(
        ".yardstick"
    ),
) -> None:
    """Measure the environments (or an embedded scratch Redis), land, build, render."""
    if profile not in PROFILES:
        fail(f"--profile: unknown profile {profile!r} (choose {', '.join(sorted(PROFILES))})")
    from yardstick.app.runtime import configure_prefect

    # Prefect's settings before its first import (flows.targets imports it), so that its
    # home and the ephemeral server's start timeout are ours; the folder comes later.
    configure_prefect(state_dir, create=False)
    # Validate before Prefect starts: a bad file or name lands nothing.
    from yardstick.flows.targets import EMBEDDED_NAME, missing_secrets, select, sites_of
    from yardstick.settings.config import LOCAL_SITE

    problems: list[str] = []
    if config is not None:
        try:
            loaded = load_config(config)
            chosen = select(loaded.environments, env, str(config))
        except ConfigError as exc:
            fail(str(exc))
        lake = lake or loaded.lake
        # Only the local site's secrets: other sites' runs check theirs where they live.
        missing = missing_secrets(sites_of(chosen).get(LOCAL_SITE, []))
        if missing:
            problems.append(f"{config}: " + "; ".join(missing))
    lake = lake or "lake"
    for name in env or []:
        if config is None and name != EMBEDDED_NAME:
            fail(f"--env: no environment {name!r} without --config (known: {EMBEDDED_NAME})")
    from yardstick.storage.preflight import NotWritable, check_writable, path_problems, run_folders

    # Every problem of the file and the paths at once, in one line, before anything is
    # created or contacted.
    problems += path_problems(lake, warehouse, out)
    if problems:
        fail("; ".join(problems))
    try:
        check_writable(run_folders(lake, warehouse, out))
    except NotWritable as exc:
        fail(str(exc))
    home = configure_prefect(state_dir)
    from yardstick.app.prefect_server import PrivatePrefectServer

    server = None
    if not os.environ.get("PREFECT_API_URL"):
        # Its start (~10 s) overlaps the flows' imports.
        server = PrivatePrefectServer(home).spawn()
    from yardstick.flows.nightly import nightly  # Prefect reads its settings on import

    target = str(config) if config else "an embedded scratch Redis"
    with ExitStack() as stack:
        if server is not None:
            stack.enter_context(_private_prefect_server(server))
        stack.enter_context(interrupt.signals_stop_the_run((signal.SIGINT, signal.SIGTERM)))
        stack.enter_context(console.status(f"Measuring {target} (profile {profile})…"))
        try:
            state = nightly(
                config_path=str(config) if config else None,
                env_names=env or None,
                profile=profile,
                lake_dir=str(lake),
                warehouse_path=str(warehouse),
                out_dir=str(out),
                return_state=True,
            )
        except BaseException:
            # SIGTERM reaches the flow as Prefect's TerminationSignal, raised again after
            # the families stopped and the servers were restored.
            if not interrupt.STOP.is_set():
                raise
            state = None
    summary = state.result(raise_on_failure=False) if state is not None else None
    if interrupt.STOP.is_set():
        known = summary is not None and not isinstance(summary, BaseException)
        where = summary.stopped if known else None
        if known:
            _print_summary(summary, rendered=where is None)
        sentence = _stopped_sentence(where if where or not known else "finished")
        fail(f"{interrupt.stop_reason()}: {sentence}", code=interrupt.exit_code())
    if isinstance(summary, BaseException):
        fail(f"run failed: {type(summary).__name__}: {summary}", code=1)
    _print_summary(summary)
    for line in summary.problems:
        err.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    if summary.failed or summary.problems:
        raise typer.Exit(1)


def _stopped_sentence(where: str | None) -> str:
    """What a stopped run left, in words that are true for where the stop found it."""
    if where == "measuring":
        return (
            "stopped; what the run changed on scratch servers was set back, the interruption "
            "is recorded in the lake, and the next run updates the warehouse and reports"
        )
    if where == "warehouse":
        return (
            "stopped while updating the warehouse; the measurements had landed, the update was "
            "abandoned (dbt cancelled) and no report was rendered: the next run updates the "
            "warehouse and reports"
        )
    if where == "reports":
        return (
            "stopped after the warehouse was updated; no report was rendered or announced "
            "(`yardstick report` renders them, as does the next run)"
        )
    if where == "finished":
        return "came as the run finished; its warehouse and reports are complete"
    # The flow ended otherwise (Prefect's own SIGTERM handling).
    return (
        "stopped; the measurements that finished have landed, what the run changed on scratch "
        "servers was set back, and the next run updates the warehouse and reports"
    )


def _drain_prefect_workers() -> None:
    """Send Prefect's queued logs and events before its server stops (else each is retried
    against a closed port, for minutes, at exit)."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        try:
            result = APILogWorker.instance().drain()
            if inspect.isawaitable(result):
                await result
        except RuntimeError:
            pass  # never started
        result = EventsWorker.drain_all()
        if inspect.isawaitable(result):
            await result

    run_coro_as_sync(drain())


@contextmanager
def _private_prefect_server(server) -> Iterator[None]:
    """Run the flow against the spawned Prefect server of its own (no PREFECT_API_URL)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from yardstick.app.prefect_server import PrefectServerFailed
    from yardstick.flows.hostlock import PRIVATE_API_VARIABLE

    try:
        server.wait()
    except PrefectServerFailed as exc:
        fail(str(exc), code=1)
    if server.cleaned:
        console.print(server.cleaned)
    os.environ[PRIVATE_API_VARIABLE] = "1"  # no other run can see this server's limits
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            try:
                yield
            finally:
                _drain_prefect_workers()
    finally:
        server.stop()
        os.environ.pop(PRIVATE_API_VARIABLE, None)


def _print_summary(summary, rendered: bool = True) -> None:
    """The end-of-run table: one line per environment."""
    table = Table(title=f"run {summary.run_id} ({summary.profile}, {summary.wall_s:.1f} s)")
    for column in ("environment", "mode", "status", "time", "report", "error"):
        table.add_column(column)
    for o in summary.outcomes:
        colour = {"ok": "green", "partial": "yellow"}.get(o.status, "red")
        table.add_row(
            o.env,
            o.mode,
            f"[{colour}]{o.status}[/]",
            f"{o.duration_s:.1f} s",
            escape(o.report or ""),
            escape(o.error or ""),
        )
    console.print(table)
    if not rendered:
        return
    index = Path(summary.out_dir) / "index.md"
    console.print(f"index: {index}  warehouse: {summary.warehouse_path}")


ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", help="Environments YAML whose `lake:` is the lake (--lake wins)."),
]
LakeChoiceOpt = Annotated[
    str | None,
    typer.Option(
        "--lake", help="Lake: a folder or s3://bucket/prefix (default: the config's, ./lake)."
    ),
]


@app.command()
def report(
    config: ConfigOpt = None,
    lake: LakeChoiceOpt = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    out: OutOpt = Path("reports-out"),
) -> None:
    """Rebuild the warehouse and every environment's latest report from the lake alone."""
    import duckdb

    from yardstick.reports.render import render_reports
    from yardstick.storage.warehouse import update

    _check_paths(warehouse, out)
    lake = _chosen_lake(lake, config, warehouse)
    _check_lake(lake)
    from yardstick.storage.dbt import signals_stop_the_update

    try:
        with signals_stop_the_update():
            result = update(lake, warehouse, full=True)
    except interrupt.Interrupted as exc:
        fail(f"{exc}: the warehouse was not rebuilt (left as it was)", code=interrupt.exit_code())
    except (RuntimeError, duckdb.Error, OSError) as exc:
        # The previous warehouse is left as it was; say which file or model failed.
        fail(f"{lake}: warehouse not rebuilt: {_first_line(exc)}", code=1)
    written = render_reports(warehouse, out)
    console.print(
        f"{len(written)} report(s) in {out}; warehouse {warehouse} ({result.wall_s:.1f} s)"
    )


@app.command()
def compact(
    config: ConfigOpt = None,
    lake: LakeChoiceOpt = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    detail_days: Annotated[
        int, typer.Option(help="Days of per-key and histogram detail to keep (figures stay).")
    ] = 30,
    update: Annotated[bool, typer.Option(help="Update the warehouse first.")] = True,
) -> None:
    """Merge the lake's small files, update the warehouse, drop detail past its retention."""
    import duckdb

    from yardstick.storage import compaction, retention
    from yardstick.storage.warehouse import update as update_warehouse

    if detail_days < 1:
        fail(f"--detail-days: must be at least 1 (got {detail_days})")
    _check_paths(warehouse, None)
    lake = _chosen_lake(lake, config, warehouse)
    _check_lake(lake)
    try:
        console.print(compaction.compact(lake).summary())
    except OSError as exc:
        fail(f"{lake}: not compacted: {_first_line(exc)}", code=1)
    if update:
        from yardstick.storage.dbt import signals_stop_the_update

        try:
            with signals_stop_the_update():
                result = update_warehouse(lake, warehouse)
        except interrupt.Interrupted as exc:
            fail(f"{exc}: the warehouse update was abandoned", code=interrupt.exit_code())
        except (RuntimeError, duckdb.Error, OSError) as exc:
            fail(f"{warehouse}: not updated: {_first_line(exc)}", code=1)
        console.print(f"warehouse {result.mode} ({result.reason}) in {result.wall_s:.1f} s")
    try:
        console.print(retention.apply(lake, warehouse, detail_days).summary())
    except OSError as exc:
        fail(f"{lake}: retention not applied: {_first_line(exc)}", code=1)


@app.command()
def check(
    config: ConfigOpt = None,
    lake: LakeChoiceOpt = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
) -> None:
    """Run the SQL models' tests (dbt: grains unique and not null, accepted values, unit tests)
    on the warehouse."""
    from yardstick.storage import dbt

    _check_paths(warehouse, None)
    if not warehouse.exists():
        fail(f"{warehouse}: no warehouse yet (run `yardstick run` or `yardstick report`)")
    given = lake is not None or config is not None
    lake = _chosen_lake(lake, config, warehouse)
    recorded = _recorded_lake(warehouse)
    if given and recorded is not None and _other_lake(recorded, lake):
        fail(
            f"{warehouse}: built from lake {recorded}, not {lake} "
            "(rebuild it with `yardstick report` for that lake)"
        )
    try:
        result = dbt.run(warehouse, ["test"])
    except interrupt.Interrupted as exc:
        fail(str(exc), code=interrupt.exit_code())
    except dbt.ModelError as exc:
        fail(f"{warehouse}: {exc}", code=1)
    console.print(f"{len(result.nodes)} model tests passed on {warehouse} (lake {lake})")


def _first_line(exc: BaseException) -> str:
    """An error's first line (its class name when it has no text)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_paths(warehouse: Path, out: Path | None) -> None:
    """A directory where the warehouse file goes, a file where the output folder goes: one
    line before anything is read or written."""
    from yardstick.storage.preflight import path_problems

    problems = path_problems(None, warehouse, out)
    if problems:
        fail("; ".join(problems))


def _chosen_lake(lake: str | None, config: Path | None, warehouse: Path) -> str:
    """The lake to read: --lake, else the environments file's `lake:`, else ./lake; said on
    screen. Without either option, a warehouse built from another lake (an S3 one, say) is
    not silently rebuilt from a stale local ./lake."""
    source = "--lake" if lake else ""
    if not lake and config is not None:
        try:
            lake = load_config(config).lake
        except ConfigError as exc:
            fail(str(exc))
        source = f"`lake:` of {config}" if lake else f"default: {config} names no `lake:`"
    if not lake:
        lake, source = "lake", source or "default"
        recorded = _recorded_lake(warehouse)
        if config is None and recorded is not None and _other_lake(recorded, lake, strict=False):
            fail(
                f"{warehouse}: built from lake {recorded}, not ./lake: give --config "
                "<environments file> (its `lake:`) or --lake"
            )
    console.print(escape(f"lake: {lake} ({source})"), highlight=False, soft_wrap=True)
    return lake


def _recorded_lake(warehouse: Path) -> str | None:
    """The lake the warehouse was last updated from (None without one, or when unreadable)."""
    if not warehouse.is_file():
        return None
    import duckdb

    from yardstick.storage.warehouse import META

    try:
        con = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error:
        return None
    try:
        row = con.execute(f"select value from {META} where key = 'lake'").fetchone()
    except duckdb.Error:
        return None
    finally:
        con.close()
    return row[0] if row else None


def _other_lake(recorded: str, lake: str, strict: bool = True) -> bool:
    """Whether the lake a warehouse records is not `lake`. A local path is recorded as given
    (relative to where that run started): two local paths differ only when `strict` and they
    do not resolve to the same folder from here."""
    from yardstick.storage import lakefs

    if lakefs.is_remote(recorded) or lakefs.is_remote(lake):
        return recorded.rstrip("/") != lake.rstrip("/")
    return strict and Path(recorded).resolve() != Path(lake).resolve()


@app.command()
def trend(
    ctx: typer.Context,
    env: Annotated[str, typer.Option("--env", help="Environment name.")],
    figure: Annotated[str, typer.Option("--figure", help="Figure name, e.g. rtt_client_p99_us.")],
    subject: Annotated[
        str, typer.Option(help="Cell, command or prefix for figures that have one.")
    ] = "",
    since: Annotated[str | None, typer.Option(help="First day, YYYY-MM-DD.")] = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
) -> None:
    """Print a figure's history for one environment, oldest first, with change markers."""
    from yardstick.reports.changepoints import series_change_points
    from yardstick.reports.render import fmt

    con = _open_warehouse(warehouse, ctx)
    envs = [r[0] for r in con.execute("select distinct env from stg_runs").fetchall()]
    figures = [r[0] for r in con.execute("select figure from figure_catalog").fetchall()]
    if env not in envs:
        fail(f"--env: no environment {env!r} in {warehouse} ({_close(env, envs)})")
    if figure not in figures:
        fail(f"--figure: no figure {figure!r} ({_close(figure, figures)})")
    subjects = [
        r[0]
        for r in con.execute(
            "select distinct subject from figure_trends where env = ? and figure = ?",
            [env, figure],
        ).fetchall()
    ]
    if subjects and subject not in subjects:
        known = _close(subject, subjects)
        fail(f"--subject: {figure} on {env} has no subject {subject!r} ({known})")
    try:
        since_day = date.fromisoformat(since) if since else date.min
    except ValueError:
        fail(f"--since: {since!r} is not a date (YYYY-MM-DD)")
    rows = con.execute(
        "select started_at, run_id, value, unit, nature, n, min_value, max_value,"
        " concat_ws(' ', case server_product when 'valkey' then 'Valkey' when 'redis' then 'Redis'"
        " else server_product end, coalesce(server_version, redis_version)),"
        " environment_changed, noisy, rolling_median, series_started, previous_profile, profile,"
        " series from figure_trends"
        " where env = ? and figure = ? and subject = ? and started_at::date >= ?"
        " order by started_at, run_id",
        [env, figure, subject, since_day],
    ).fetchall()
    if not rows:
        console.print(f"no history for {figure} on {env}" + (f" since {since}" if since else ""))
        return
    points = {p.run_id: p for p in series_change_points(con, env, figure, subject)}
    verdict = con.execute(
        "select verdict, change_share, noise_share from changes"
        " where env = ? and figure = ? and subject = ?",
        [env, figure, subject],
    ).fetchone()
    unit, nature = rows[0][3], rows[0][4]
    label = f"{figure}{f' [{subject}]' if subject else ''} on {env} ({unit}, {nature})"
    table = Table(title=label)
    for column in (
        "started (UTC)",
        "run",
        "value",
        "n",
        "min",
        "max",
        "rolling median",
        "server",
        "markers",
    ):
        table.add_column(column)
    starts: list[str] = []
    for (
        started,
        run_id,
        value,
        _,
        _,
        n,
        lo,
        hi,
        version,
        changed,
        noisy,
        rolling,
        series_started,
        previous_profile,
        profile,
        series,
    ) in rows:
        markers = []
        if series_started:
            # Another profile or other settings: compared only with its own series from here.
            markers.append("new series")
            starts.append(
                f"{started:%Y-%m-%d %H:%M} ({run_id}): new series "
                f"({previous_profile} → {profile}, settings {series}): compared "
                "only with runs of the same profile and settings from here"
            )
        if run_id in points:
            markers.append(f"change point ({points[run_id].change_share * 100:+.1f} %)")
        if changed:
            markers.append("environment changed")
        if noisy:
            markers.append("noisy")
        when = f"{started:%Y-%m-%d %H:%M}" if started else "?"
        table.add_row(
            when,
            run_id,
            fmt(value, unit),
            str(n),
            fmt(lo, unit),
            fmt(hi, unit),
            fmt(rolling, unit),
            version or "",
            ", ".join(markers),
        )
    console.print(table)
    for line in starts:
        console.print(escape(line), soft_wrap=True)
    if verdict:
        share, band = verdict[1], verdict[2]
        share = f" ({share * 100:+.1f} % against the baseline" if share is not None else ""
        if share:
            share += f", noise band ± {band * 100:.1f} %)" if band is not None else ")"
        console.print(f"latest run: {verdict[0]}{share}")


@app.command()
def changes(
    ctx: typer.Context,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    env: Annotated[list[str] | None, typer.Option("--env", help="Only these environments.")] = None,
    all_verdicts: Annotated[
        bool, typer.Option("--all", help="Also list steady and new figures.")
    ] = False,
) -> None:
    """Tonight's verdict: what moved in each environment's latest run, and runs that crashed.

    Exits 1 when a regression is listed (a cron or CI job can act on it), 0 otherwise."""
    from yardstick.reports.render import fmt

    con = _open_warehouse(warehouse, ctx)
    known = [r[0] for r in con.execute("select env from latest_full_runs").fetchall()]
    for name in env or []:
        if name not in known:
            fail(
                f"--env: no environment {name!r} with a full run in {warehouse} "
                f"({_close(name, known)})"
            )
    chosen = env or known
    summaries = con.execute(
        "select env, verdict, figures, judged, noisy, new, new_series from verdicts"
        " where env in ? order by env",
        [chosen or [""]],
    ).fetchall()
    hidden = "" if all_verdicts else " and verdict not in ('steady', 'new')"
    rows = con.execute(
        "select env, figure, subject, nature, value, unit, baseline_median, change_share,"
        " noise_share, verdict, first_night from changes"
        f" where env in ?{hidden} order by env, case verdict when 'regression' then 0"
        " when 'improvement' then 1 else 2 end, verdict, figure, subject",
        [chosen or [""]],
    ).fetchall()
    crashed = con.execute(
        "select env, run_id, why from crashed_runs where env in ? order by env, run_id",
        [chosen or [""]],
    ).fetchall()
    if not summaries:
        console.print("no history yet")
        return
    for name, overall, figures, judged, noisy, new, new_series in summaries:
        line = (
            f"{name}: {overall} — {judged} of {figures} figures judged"
            f" ({noisy} too noisy to see a 5 % change, {new} without enough history"
        )
        line += f", {new_series} in a new series)" if new_series else ")"
        console.print(escape(line))
    if rows:
        table = Table(title="tonight's verdict (the latest full run of each environment)")
        for column in (
            "environment",
            "figure",
            "subject",
            "nature",
            "value",
            "baseline",
            "change",
            "noise band",
            "verdict",
        ):
            table.add_column(column)
        colours = {
            "regression": "red",
            "improvement": "green",
            "unconfirmed": "yellow",
            "noisy": "yellow",
        }
        for name, figure, subject, nature, value, unit, base, share, band, verdict, first in rows:
            colour = colours.get(verdict, "white")
            label = f"{verdict}{' (new tonight)' if first else ''}"
            table.add_row(
                name,
                figure,
                subject,
                nature,
                fmt(value, unit),
                fmt(base, unit),
                f"{share * 100:+.1f} %" if share is not None else "",
                f"± {band * 100:.1f} %" if band is not None else "",
                f"[{colour}]{escape(label)}[/]",
            )
        console.print(table)
    for name, run_id, why in crashed:
        console.print(escape(f"{name}: run {run_id} crashed ({why}): its files are in no figure"))
    if any(row[9] == "regression" for row in rows):
        raise typer.Exit(1)


def _check_lake(lake: str) -> None:
    """A local lake must exist; an S3 lake is checked by its first listing."""
    from yardstick.storage import lakefs

    if not lakefs.is_remote(lake) and not Path(lake).is_dir():
        fail(f"{lake}: no lake here (run `yardstick run` first)")


def _open_warehouse(warehouse: Path, ctx: typer.Context):
    """The warehouse, read-only, or a one-line error."""
    from yardstick.storage.warehouse import connect_read_only

    try:
        con = connect_read_only(warehouse)
    except FileNotFoundError as exc:
        fail(str(exc))
    # Closed when the command ends: a reader holds the warehouse's shared lock until then,
    # and an update in the same process (a test's next command) would wait for it.
    ctx.call_on_close(con.close)
    return con


def _close(name: str, choices: list[str]) -> str:
    """'did you mean …' text listing the closest names, or all of them when few."""
    close = get_close_matches(name, choices, n=3, cutoff=0.4)
    if close:
        return "did you mean: " + ", ".join(close)
    return "known: " + (", ".join(sorted(choices)[:10]) or "none")


def main() -> None:
    """Entry point for `python -m yardstick.app.cli`."""
    app(prog_name="yardstick")


if __name__ == "__main__":
    sys.exit(main())
