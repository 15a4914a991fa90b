"""The `yardstick` command: run measurements, rebuild reports, read a figure's history."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import ExitStack
from datetime import date
from difflib import get_close_matches
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from yardstick import __version__, interrupt
from yardstick.app import listing
from yardstick.app.runtime import configure_prefect  # first: opts out of Prefect's telemetry
from yardstick.app.usage import OneLineUsage
from yardstick.errors import ConfigError
from yardstick.settings.names import PROFILE_NAMES

if TYPE_CHECKING:
    from yardstick.storage.lakefs import Lake

# Nothing heavy at the top, nor in a command before its input is checked: `-h`, `--version`, a
# bad file or flag, `trend` and `changes` answer without Prefect, dbt or a family imported
# (tests/test_cli_light.py; figures: bench/cli_latency.py).

app = typer.Typer(
    cls=OneLineUsage,  # a mistyped option or value: one line, exit 2
    add_completion=False,
    no_args_is_help=True,
    help=__doc__,
    context_settings={"help_option_names": ["-h", "--help"]},
)
console = Console()
# Errors, progress lines and Prefect's log lines: one Console, so they never share a line,
# and stdout keeps only what a command prints (a table, CSV or JSON).
# No markup: a log line's `throughput[scratch-a]` is text, not a style tag.
err = Console(stderr=True, markup=False)

PROFILE_CHOICES = "|".join(PROFILE_NAMES)


def _print_version(value: bool) -> None:
    """--version: the package version, then exit."""
    if value:
        console.print(f"yardstick {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Measure Redis servers with Prefect flows; land Parquet; derive figures in DuckDB."""


WarehouseOpt = Annotated[
    Path, typer.Option("--warehouse", metavar="FILE", help="DuckDB warehouse file.")
]
OutOpt = Annotated[
    Path, typer.Option("--out", metavar="DIR", help="Directory for markdown reports.")
]
FormatOpt = Annotated[
    listing.Format,
    typer.Option(
        "--format",
        help="table (plain text when stdout is not a terminal), csv or json.",
    ),
]


def fail(message: str, code: int = 2) -> None:
    """Print one error line and exit."""
    # Escaped: a name or path such as 'a[b]' must not be read as console markup.
    err.print(
        f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True
    )
    raise typer.Exit(code)


ConfigRunOpt = Annotated[
    Path | None,
    typer.Option("--config", metavar="FILE", help="Environments YAML; none = embedded Redis."),
]
EnvsOpt = Annotated[
    list[str] | None,
    typer.Option("--env", metavar="NAME", help="Only this environment (repeat for more)."),
]
RunLakeOpt = Annotated[
    str | None,
    typer.Option(
        "--lake",
        metavar="DIR|s3://…",
        help="Lake: a folder or s3://bucket/prefix (default: the config's, ./lake).",
    ),
]
StateDirOpt = Annotated[Path, typer.Option(metavar="DIR", help="Where Prefect keeps its state.")]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Also print Prefect's INFO log lines.")
]


@app.command()
def run(
    config: ConfigRunOpt = None,
    env: EnvsOpt = None,
    profile: Annotated[
        str, typer.Option(metavar=f"[{PROFILE_CHOICES}]", help="Measurement profile.")
    ] = "nightly",
    lake: RunLakeOpt = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    out: OutOpt = Path("reports-out"),
    state_dir: StateDirOpt = Path(".yardstick"),
    verbose: VerboseOpt = False,
    output: FormatOpt = listing.Format.table,
) -> None:
    """Measure the environments (or an embedded scratch Redis), land, build, render."""
    if profile not in PROFILE_NAMES:
        fail(f"--profile: unknown profile {profile!r} (choose {', '.join(PROFILE_NAMES)})")
    chosen, lake, home = _prepare(config, env, lake, state_dir, warehouse, out)
    from yardstick.flows.nightly import nightly  # Prefect reads its settings on import

    plans = _plans(chosen)
    expected = _expected(warehouse, profile)
    state = _run_flow(
        nightly,
        verbose,
        plans,
        expected,
        host_groups=_host_groups(chosen),
        config_path=str(config) if config else None,
        env_names=env or None,
        profile=profile,
        lake_dir=str(lake),
        warehouse_path=str(warehouse),
        out_dir=str(out),
    )
    from yardstick.flows.outcome import summary_of

    summary = summary_of(state.result(raise_on_failure=False)) if state is not None else None
    if interrupt.STOP.is_set():
        known = summary is not None and not isinstance(summary, BaseException)
        where = summary.stopped if known else None
        if known:
            _print_summary(summary, output, rendered=where is None)
        sentence = _stopped_sentence(where if where or not known else "finished")
        fail(f"{interrupt.stop_reason()}: {sentence}", code=interrupt.exit_code())
    if isinstance(summary, BaseException):
        fail(f"run failed: {type(summary).__name__}: {summary}", code=1)
    _print_summary(summary, output)
    for line in summary.problems:
        err.print(
            f"[bold red]error:[/] {escape(line)}", markup=True, highlight=False, soft_wrap=True
        )
    if summary.failed or summary.problems:
        raise typer.Exit(1)


@app.command()
def collect(
    config: ConfigRunOpt = None,
    env: EnvsOpt = None,
    lake: RunLakeOpt = None,
    state_dir: StateDirOpt = Path(".yardstick"),
    verbose: VerboseOpt = False,
    output: FormatOpt = listing.Format.table,
) -> None:
    """Collect once by hand (SLOWLOG, latency monitor, commandstats: read commands only) into
    the lake, as the 5-minute `collect` deployment does."""
    chosen, lake, home = _prepare(config, env, lake, state_dir, None, None)
    from yardstick.flows.collect import collect as collect_flow

    # No lines per environment: a collection reads in plain threads, not task runs (a
    # second or two each), and says what it landed when it ends.
    state = _run_flow(
        collect_flow,
        verbose,
        {},
        {},
        config_path=str(config) if config else None,
        env_names=env or None,
        lake_dir=str(lake),
    )
    from yardstick.flows.outcome import summary_of

    summary = summary_of(state.result(raise_on_failure=False)) if state is not None else None
    if interrupt.STOP.is_set():
        fail(
            f"{interrupt.stop_reason()}: stopped; what finished has landed",
            code=interrupt.exit_code(),
        )
    if isinstance(summary, BaseException):
        fail(f"collection failed: {type(summary).__name__}: {summary}", code=1)
    table = listing.Listing(
        ["environment", "status", "time", "landed", "error"],
        [
            [o.env, o.status, round(o.duration_s, 3), o.landed_rows, o.error]
            for o in summary.outcomes
        ],
        title=f"collection {summary.run_id} ({summary.wall_s:.1f} s)",
        shown=[
            [
                o.env,
                o.status,
                f"{o.duration_s:.1f} s",
                ", ".join(f"{n} {t}" for t, n in sorted(o.landed_rows.items()) if n)
                or "nothing new",
                o.error or "",
            ]
            for o in summary.outcomes
        ],
    )
    if output is listing.Format.json:
        listing.print_json(summary.model_dump(mode="json"))
    else:
        listing.print_listing(table, output, console)
    if summary.failed:
        raise typer.Exit(1)


def _prepare(
    config: Path | None,
    env: list[str] | None,
    lake: str | None,
    state_dir: Path,
    warehouse: Path | None,
    out: Path | None,
):
    """Check the file, the names, the secrets and the paths before Prefect or a family is
    imported (a bad one costs a fraction of a second and lands nothing); return (the chosen
    environments, None for the embedded one; the lake; Prefect's home)."""
    # Prefect's settings before its first import (the flow the command runs next), so that
    # its home and the ephemeral server's start timeout are ours; the folder comes later.
    configure_prefect(state_dir, create=False)
    from yardstick.settings.config import LOCAL_SITE, load_config
    from yardstick.settings.selection import EMBEDDED_NAME, missing_secrets, select, sites_of

    problems: list[str] = []
    chosen = None
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

    where = _lake(lake)
    # Every problem of the file and the paths at once, in one line, before anything is
    # created or contacted.
    problems += path_problems(where, warehouse, out)
    if problems:
        fail("; ".join(problems))
    folders = run_folders(where, warehouse or "warehouse.duckdb", out or ".")
    if warehouse is None:
        folders = {"lake": folders["lake"]}
    try:
        check_writable(folders)
    except NotWritable as exc:
        fail(str(exc))
    return chosen, lake, configure_prefect(state_dir)


def _plans(envs) -> dict[str, list[str]]:
    """The task runs each environment's line counts (the families that will run, by their
    task's name); empty for the embedded default, known once it starts."""
    from yardstick.flows.plan import families_for

    return {
        e.name: [f.task_name for f in families_for(e) if f.skip_reason(e) is None]
        for e in envs or []
    }


def _host_groups(envs) -> dict[str, str]:
    """Each environment's host group: a waiting line names the environment ahead on its host."""
    from yardstick.flows.plan import host_group_label, host_groups

    return {e.name: host_group_label(g) for g in host_groups(list(envs or [])) for e in g}


def _expected(warehouse: Path, profile: str) -> dict[tuple[str, str], float]:
    """Seconds per (environment, task) from earlier runs of the profile, for the ETA."""
    from yardstick.app.progress import expected_durations
    from yardstick.flows.plan import FAMILIES

    task_of = {f.name: f.task_name for f in FAMILIES}
    return {
        (env, task_of[family]): seconds
        for (env, family), seconds in expected_durations(warehouse, profile).items()
        if family in task_of
    }


def _run_flow(flow, verbose: bool, plans, expected, host_groups=None, **parameters):
    """Run a flow in this process: a Prefect flow run when PREFECT_API_URL names a server
    (its task runs recorded there), else the flow's function called plainly (no Prefect
    server is started for a one-shot run: engine.py); Ctrl-C and SIGTERM stop it cleanly, a
    line per environment on a terminal with the log lines above; its final state (None when
    stopped)."""
    import uuid

    from prefect.settings import PREFECT_SERVER_EPHEMERAL_ENABLED, temporary_settings
    from prefect.states import Completed, State

    from yardstick import engine
    from yardstick.app.progress import (
        RunProgress,
        console_on_its_own_descriptor,
        shared_console_logging,
    )
    from yardstick.flows.plan import MAX_PARALLEL_GROUPS

    api = bool(os.environ.get("PREFECT_API_URL"))
    # A name of our own: the progress lines find the flow run's task runs by it.
    name = f"{flow.name}-{uuid.uuid4().hex[:8]}"
    engine.journal.clear()
    progress = RunProgress(
        err,
        name,
        plans,
        expected,
        journal=None if api else engine.journal,
        groups=host_groups,
        max_groups=MAX_PARALLEL_GROUPS,
    )
    with ExitStack() as stack:
        stack.enter_context(console_on_its_own_descriptor(err))
        stack.enter_context(shared_console_logging(err, verbose))
        if not api:
            # Nothing may start Prefect's ephemeral server behind the run's back: a client
            # asked for without an API fails instead.
            stack.enter_context(temporary_settings({PREFECT_SERVER_EPHEMERAL_ENABLED: False}))
        stack.enter_context(interrupt.signals_stop_the_run((signal.SIGINT, signal.SIGTERM)))
        stack.enter_context(progress.shown())
        try:
            if api:
                return flow.with_options(flow_run_name=name)(**parameters, return_state=True)
            result = flow.fn(**parameters)
            return result if isinstance(result, State) else Completed(data=result)
        except BaseException:
            # SIGTERM reaches the flow as Prefect's TerminationSignal, raised again after
            # the families stopped and the servers were restored.
            if not interrupt.STOP.is_set():
                raise
            return None


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


def _print_summary(summary, output: listing.Format, rendered: bool = True) -> None:
    """The end-of-run listing: one line per environment (JSON: the whole summary)."""
    if output is listing.Format.json:
        listing.print_json(summary.model_dump(mode="json"))
        return
    colours = {"ok": "green", "partial": "yellow"}
    table = listing.Listing(
        ["environment", "mode", "status", "time", "report", "error"],
        [
            [o.env, o.mode, o.status, round(o.duration_s, 3), o.report, o.error]
            for o in summary.outcomes
        ],
        title=f"run {summary.run_id} ({summary.profile}, {summary.wall_s:.1f} s)",
        shown=[
            [o.env, o.mode, o.status, f"{o.duration_s:.1f} s", o.report or "", o.error or ""]
            for o in summary.outcomes
        ],
        styles=[colours.get(o.status, "red") for o in summary.outcomes],
    )
    listing.print_listing(table, output, console)
    if not rendered or output is listing.Format.csv:
        return
    index = Path(summary.out_dir) / "index.md"
    listing.say(console, f"index: {index}  warehouse: {summary.warehouse_path}")


ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="Environments YAML whose `lake:` is the lake (--lake wins).",
    ),
]
LakeChoiceOpt = RunLakeOpt


@app.command()
def report(
    config: ConfigOpt = None,
    lake: LakeChoiceOpt = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    out: OutOpt = Path("reports-out"),
) -> None:
    """Rebuild the warehouse and every environment's latest report from the lake alone."""
    _check_paths(warehouse, out)
    lake = _chosen_lake(lake, config, warehouse)
    _check_lake(lake)
    import duckdb

    from yardstick.reports.render import render_reports
    from yardstick.storage import loghealth
    from yardstick.storage.dbt import signals_stop_the_update
    from yardstick.storage.warehouse import update

    # A log a crash damaged would lose runs silently: repaired where safe, else refused.
    repaired, refused = loghealth.check_and_repair(lake)
    for line in repaired:
        err.print(
            f"[yellow]warning:[/] {escape(line)}", markup=True, highlight=False, soft_wrap=True
        )
    if refused:
        fail("; ".join(refused), code=1)
    try:
        with signals_stop_the_update():
            result = update(lake, warehouse, full=True)
    except interrupt.Interrupted as exc:
        fail(f"{exc}: the warehouse was not rebuilt (left as it was)", code=interrupt.exit_code())
    except (RuntimeError, duckdb.Error, OSError) as exc:
        # The previous warehouse is left as it was; say which file or model failed.
        fail(f"{lake}: warehouse not rebuilt: {_first_line(exc)}", code=1)
    written = render_reports(warehouse, out, lake_notes=repaired)
    console.print(
        f"{len(written)} report(s) in {out}; warehouse {warehouse} ({result.wall_s:.1f} s)"
    )


@app.command()
def compact(
    config: ConfigOpt = None,
    lake: LakeChoiceOpt = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    detail_days: Annotated[
        int,
        typer.Option(
            metavar="DAYS", help="Days of per-key and histogram detail to keep (figures stay)."
        ),
    ] = 30,
    update: Annotated[bool, typer.Option(help="Update the warehouse first.")] = True,
) -> None:
    """Merge the lake's small files, update the warehouse, drop detail past its retention."""
    if detail_days < 1:
        fail(f"--detail-days: must be at least 1 (got {detail_days})")
    _check_paths(warehouse, None)
    lake = _chosen_lake(lake, config, warehouse)
    _check_lake(lake)
    import duckdb

    from yardstick.storage import compaction, retention
    from yardstick.storage.warehouse import update as update_warehouse

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


lake_app = typer.Typer(help="The lake's Delta tables.", no_args_is_help=True)
app.add_typer(lake_app, name="lake")


@lake_app.command("migrate")
def lake_migrate(config: ConfigOpt = None, lake: LakeChoiceOpt = None) -> None:
    """Convert a lake of the earlier format into Delta tables (rows counted per table and
    environment before the old files go); the first compaction does the same."""
    lake = _chosen_lake(lake, config, Path("warehouse.duckdb"))
    _check_lake(lake)
    from yardstick.storage import migrate

    if not migrate.needed(lake):
        said = f"{lake}: nothing to migrate (every table is a Delta table)"
        console.print(escape(said), highlight=False, soft_wrap=True)
        return
    try:
        console.print(escape(migrate.migrate(lake).summary()), highlight=False, soft_wrap=True)
    except (OSError, RuntimeError) as exc:
        fail(f"{lake}: not migrated: {_first_line(exc)}", code=1)


@lake_app.command("repair")
def lake_repair(config: ConfigOpt = None, lake: LakeChoiceOpt = None) -> None:
    """Repair the Delta logs a crash damaged: a missing or empty commit is replaced (in the
    middle of a log too) and runs whose files no commit names are added back, never twice."""
    lake = _chosen_lake(lake, config, Path("warehouse.duckdb"))
    _check_lake(lake)
    if lake.remote:
        fail(f"{lake}: an S3 lake's log is not checked by `yardstick lake repair`")
    from yardstick.storage import loghealth

    try:
        done, refused = loghealth.repair(lake, loghealth.check(lake), middle_too=True)
    except OSError as exc:
        fail(f"{lake}: not repaired: {_first_line(exc)}", code=1)
    for line in done:
        console.print(escape(line), highlight=False, soft_wrap=True)
    if refused:
        fail("; ".join(refused), code=1)
    if not done:
        console.print(escape(f"{lake}: every table's log is whole"), highlight=False)


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
    if given and recorded is not None and _other_lake(recorded, lake.uri):
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


def _chosen_lake(lake: str | None, config: Path | None, warehouse: Path) -> Lake:
    """The lake to read: --lake, else the environments file's `lake:`, else ./lake; said on
    screen. Without either option, a warehouse built from another lake (an S3 one, say) is
    not silently rebuilt from a stale local ./lake."""
    source = "--lake" if lake else ""
    if not lake and config is not None:
        try:
            from yardstick.settings.config import load_config

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
    return _lake(lake)


def _lake(location: str) -> Lake:
    """The lake at `location`, or its one-line error (a bad scheme, credentials in a URL)."""
    from yardstick.storage.preflight import NotWritable, lake_at

    try:
        return lake_at(location)
    except NotWritable as exc:
        fail(str(exc))


def _recorded_lake(warehouse: Path) -> str | None:
    """The lake the warehouse was last updated from (None without one, or when unreadable)."""
    from yardstick.storage.reading import recorded_lake

    return recorded_lake(warehouse)


def _other_lake(recorded: str, lake: str, strict: bool = True) -> bool:
    """Whether the lake a warehouse records is not `lake`. A local path is recorded as given
    (relative to where that run started): two local paths differ only when `strict` and they
    do not resolve to the same folder from here."""
    from yardstick.storage import lakefs

    if lakefs.is_remote(recorded) or lakefs.is_remote(lake):
        return recorded.rstrip("/") != lake.rstrip("/")
    return strict and Path(recorded).resolve() != Path(lake).resolve()


# `trend`'s columns: identifiers (CSV's header, JSON's keys) and the table's headings.
TREND_COLUMNS = {
    "started_utc": "started (UTC)",
    "run_id": "run",
    "value": "value",
    "n": "n",
    "min": "min",
    "max": "max",
    "rolling_median": "rolling median",
    "server": "server",
    "markers": "markers",
}


@app.command()
def trend(
    ctx: typer.Context,
    env: Annotated[str, typer.Option("--env", metavar="NAME", help="Environment name.")],
    figure: Annotated[
        str, typer.Option("--figure", metavar="FIGURE", help="Figure name, e.g. rtt_client_p99_us.")
    ],
    subject: Annotated[
        str,
        typer.Option(metavar="SUBJECT", help="Cell, command or prefix for figures that have one."),
    ] = "",
    since: Annotated[
        str | None, typer.Option(metavar="YYYY-MM-DD", help="First day, YYYY-MM-DD.")
    ] = None,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    output: FormatOpt = listing.Format.table,
) -> None:
    """Print a figure's history for one environment, oldest first, with change markers."""
    from yardstick.reports.numbers import fmt
    from yardstick.storage import reading

    con = _open_warehouse(warehouse, ctx)
    envs = reading.measured_envs(con)
    figures = reading.figure_names(con)
    if env not in envs:
        fail(f"--env: no environment {env!r} in {warehouse} ({_close(env, envs)})")
    if figure not in figures:
        fail(f"--figure: no figure {figure!r} ({_close(figure, figures)})")
    subjects = reading.figure_subjects(con, env, figure)
    if subjects and subject not in subjects:
        known = _close(subject, subjects)
        fail(f"--subject: {figure} on {env} has no subject {subject!r} ({known})")
    try:
        since_day = date.fromisoformat(since) if since else date.min
    except ValueError:
        fail(f"--since: {since!r} is not a date (YYYY-MM-DD)")
    rows = reading.figure_history(con, env, figure, subject, since_day)
    if not rows:
        said = f"no history for {figure} on {env}" + (f" since {since}" if since else "")
        if output is listing.Format.json:
            listing.print_json({"env": env, "figure": figure, "subject": subject, "points": []})
        elif output is listing.Format.table:
            listing.say(console, said)
        else:
            listing.print_csv(listing.Listing(list(TREND_COLUMNS), []))  # its header still
            err.print(said, highlight=False)
        return
    # numpy loads here, only when there is a series to look at.
    from yardstick.reports.changepoints import series_change_points

    points = {p.run_id: p for p in series_change_points(con, env, figure, subject)}
    verdict = reading.latest_verdict(con, env, figure, subject)
    unit, nature = rows[0][3], rows[0][4]
    label = f"{figure}{f' [{subject}]' if subject else ''} on {env} ({unit}, {nature})"
    raw: list[list] = []
    shown: list[list[str]] = []
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
        raw.append([started, run_id, value, n, lo, hi, rolling, version, "; ".join(markers)])
        when = f"{started:%Y-%m-%d %H:%M}" if started else "?"
        shown.append(
            [
                when,
                run_id,
                fmt(value, unit),
                str(n),
                fmt(lo, unit),
                fmt(hi, unit),
                fmt(rolling, unit),
                version or "",
                ", ".join(markers),
            ]
        )
    points_listing = listing.Listing(
        list(TREND_COLUMNS),
        raw,
        title=label,
        shown=shown,
        headings=list(TREND_COLUMNS.values()),
    )
    latest = None
    if verdict:
        latest = {"verdict": verdict[0], "change_share": verdict[1], "noise_share": verdict[2]}
    if output is listing.Format.json:
        listing.print_json(
            {
                "env": env,
                "figure": figure,
                "subject": subject,
                "unit": unit,
                "nature": nature,
                "points": points_listing.records(),
                "latest": latest,
            }
        )
        return
    if output is listing.Format.csv:
        listing.print_csv(points_listing)
        return
    listing.print_table(points_listing, console)
    for line in starts:
        listing.say(console, line)
    if verdict:
        share, band = verdict[1], verdict[2]
        share = f" ({share * 100:+.1f} % against the baseline" if share is not None else ""
        if share:
            share += f", noise band ± {band * 100:.1f} %)" if band is not None else ")"
        listing.say(console, f"latest run: {verdict[0]}{share}")


# Columns of `changes` the table shows in its own way, or leaves to CSV and JSON; any other
# column the model grows (evidence for a verdict) is shown as it comes.
_CHANGES_SHOWN = {
    "env", "figure", "subject", "nature", "value", "unit", "baseline_median", "change_share",
    "noise_share", "verdict", "first_night", "standing", "run_id", "started_at", "better",
    "baseline_n", "noise_band", "environment_changed", "redis_version", "profile", "series",
    "series_started", "previous_profile", "direction",
    # The verdict's evidence: in the table as report_changes' sentence, in CSV/JSON as columns.
    "recent_value", "recent_k", "recent_n", "reference_median", "reference_n", "noise_sigma",
    "noise_sigma_share", "change_score", "p_value", "single_p_value", "visible_change_share",
    "change_since",
}  # fmt: skip


def _said(row: dict) -> str:
    """How long a verdict has been said: new tonight, or standing since its first night."""
    if row.get("first_night"):
        return " (new tonight)"
    if row.get("standing") and row.get("change_since") is not None:
        return f" (standing since {row['change_since']:%Y-%m-%d})"
    return ""


@app.command()
def changes(
    ctx: typer.Context,
    warehouse: WarehouseOpt = Path("warehouse.duckdb"),
    env: EnvsOpt = None,
    all_verdicts: Annotated[
        bool, typer.Option("--all", help="Also list steady and new figures.")
    ] = False,
    output: FormatOpt = listing.Format.table,
) -> None:
    """Tonight's verdict: what moved in each environment's latest run, and runs that crashed.

    Exits 1 when a regression is listed (a cron or CI job can act on it), 0 otherwise. CSV
    lists the figures; JSON holds the verdicts, the figures and the crashed runs."""
    from yardstick.reports.numbers import fmt
    from yardstick.storage import reading

    con = _open_warehouse(warehouse, ctx)
    known = reading.full_run_envs(con)
    for name in env or []:
        if name not in known:
            fail(
                f"--env: no environment {name!r} with a full run in {warehouse} "
                f"({_close(name, known)})"
            )
    chosen = env or known or [""]
    summaries = reading.verdict_summaries(con, chosen)
    rows = reading.judged_changes(con, chosen, with_steady=all_verdicts)
    crashed = reading.crashed_runs(con, chosen)
    regression = any(row["verdict"] == "regression" for row in rows)
    if output is listing.Format.json:
        causes = reading.change_causes(con, chosen)
        for row in rows:
            # What else moved (marts.change_causes): its line, and its causes top first.
            line, found = causes.get((row["env"], row["figure"], row["subject"]), (None, []))
            row.update(causes_line=line, causes=found)
        listing.print_json({"verdicts": summaries, "changes": rows, "crashed": crashed})
        raise typer.Exit(1 if regression else 0)
    columns = list(rows[0]) if rows else reading.change_columns(con)
    if output is listing.Format.csv:
        listing.print_csv(listing.Listing(columns, [list(r.values()) for r in rows]))
        raise typer.Exit(1 if regression else 0)
    if not summaries:
        listing.say(console, "no history yet")
        return
    for s in summaries:
        line = (
            f"{s['env']}: {s['verdict']} — {s['judged']} of {s['figures']} figures judged"
            f" ({s['noisy']} too noisy to see a {s['min_change_share'] * 100:g} % change,"
            f" {s['new']} without {s['min_baseline_runs']} comparable runs yet"
        )
        line += f", {s['new_series']} in a new series)" if s.get("new_series") else ")"
        listing.say(console, line)
    if rows:
        evidence = reading.change_evidence(con, chosen)
        causes = reading.change_causes(con, chosen)
        extra = [c for c in columns if c not in _CHANGES_SHOWN]
        head = ["environment", "figure", "subject", "nature", "value", "baseline", "change"]
        colours = {"regression": "red", "improvement": "green", "unconfirmed": "yellow"}
        shown = []
        for r in rows:
            share = r["change_share"]
            shown.append(
                [
                    r["env"],
                    r["figure"],
                    r["subject"] or "",
                    r["nature"] or "",
                    fmt(r["value"], r["unit"]),
                    fmt(r["baseline_median"], r["unit"]),
                    f"{share * 100:+.1f} %" if share is not None else "",
                    f"{r['verdict']}{_said(r)}",
                    evidence.get((r["env"], r["figure"], r["subject"])) or "",
                    causes.get((r["env"], r["figure"], r["subject"]), ("",))[0] or "",
                    *("" if r[c] is None else str(listing.plain(r[c])) for c in extra),
                ]
            )
        table = listing.Listing(
            [*head, "verdict", "evidence", "what else moved", *extra],
            shown,
            title="tonight's verdict (the latest full run of each environment)",
            shown=shown,
            styles=[colours.get(r["verdict"], "yellow" if r["verdict"] == "noisy" else None)
                    for r in rows],
        )  # fmt: skip
        listing.print_table(table, console)
    for c in crashed:
        listing.say(
            console,
            f"{c['env']}: run {c['run_id']} crashed ({c['why']}): its files are in no figure",
        )
    if regression:
        raise typer.Exit(1)


def _check_lake(lake: Lake) -> None:
    """A local lake must exist; an S3 lake is checked by its first listing."""
    if not lake.remote and not lake.folder.is_dir():
        fail(f"{lake}: no lake here (run `yardstick run` first)")


@app.command()
def rebaseline(
    config: Annotated[
        Path, typer.Option("--config", metavar="FILE", help="The environments file to write to.")
    ],
    env: Annotated[str, typer.Option("--env", help="The environment of the series.")],
    figure: Annotated[str, typer.Option("--figure", help="The figure (pipeline_speedup, …).")],
    by: Annotated[str, typer.Option("--by", help="Who declares it (kept in the lake).")],
    why: Annotated[str, typer.Option("--why", help="Why this is the new normal.")],
    subject: Annotated[
        str | None, typer.Option("--subject", help="One subject; left out: every subject.")
    ] = None,
    declared: Annotated[
        str | None, typer.Option("--declared", metavar="YYYY-MM-DD", help="Default: today.")
    ] = None,
) -> None:
    """Declare a series the new normal: its standing change is no longer reported, and it is
    judged again from the next run on (written to the file's `rebaseline:` list)."""
    from pydantic import ValidationError

    from yardstick.settings.config import Rebaseline
    from yardstick.settings.rebaseline import declare

    try:
        day = date.fromisoformat(declared) if declared else date.today()
        entry = Rebaseline(env=env, figure=figure, subject=subject, declared=day, by=by, why=why)
    except (ValueError, ValidationError) as exc:
        fail(f"rebaseline: {_first_line(exc)}")
    try:
        declare(config, entry)
    except ConfigError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{config}: cannot write ({exc.strerror})")
    what = f"{env} {figure}" + (f" [{subject}]" if subject else "")
    console.print(
        f"{what}: the new normal from the next run that lands it (by {by}, {day}); in {config}"
    )


def _open_warehouse(warehouse: Path, ctx: typer.Context):
    """The warehouse, read-only, or a one-line error."""
    from yardstick.storage.reading import connect_read_only

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
