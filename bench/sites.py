"""Fan-out overhead of many sites: a nightly run over 2 sites × 2 environments ÷ the same 4
environments measured in one flow run.

    .venv/bin/python bench/sites.py [--rounds N] [--families a,b,...] [--keep] [--json PATH]
        [--tiny]

Starts, all on this machine and stopped on exit (Ctrl-C included): the app's own Prefect
server (bench/_harness.prefect_server, throwaway PREFECT_HOME), four embedded
scratch redis-servers, and one `prefect worker start --pool yardstick-sites --work-queue <site>`
per site (own PREFECT_HOME and working folder, as tests/test_sites.py does). Each round runs
both variants, in alternating order, with nightly() called in this process (the hub), the
quick profile, and a fresh local lake, warehouse and reports folder per run:

- one run: the 4 environments with `site: local`, measured by the nightly run itself;
- fan-out: 2 environments at site `east`, 2 at site `west`; the nightly run sends each site
  a `yardstick-measure-site/measure-site` run on its work queue and waits for them.

It prints both walls (medians and ranges), their ratio, the measurement windows of the
slowest site (the issue's goal: fan-out ÷ one run ≤ 1.2 plus those windows), the load
average, and a timeline of the fan-out (when each site's run was created, taken by its
worker, running, finished, and when the hub noticed), the hub's tasks after measuring, and
what a fresh interpreter pays in imports. The goal is read as: fan-out wall ≤ 1.2 × one-run
wall + the slowest site's windows. Mind that the 4 loopback environments are one host group:
the one run measures them one after another, while the two sites measure side by side, so
the ratio nets the fan-out's costs against that parallelism. An untimed one-run warm-up
(dbt's parse, first imports) goes first (--no-warmup skips it). Any PREFECT_* variable of the
calling shell is ignored.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, prefect_server, stop_tree  # noqa: E402 - beside this file, not a package

REPO = Path(__file__).resolve().parents[1]
PREFECT = Path(sys.executable).parent / "prefect"
WORKDIR_STEP = "prefect.deployments.steps.set_working_directory"
# flows/sites.py SITE_POOL (not imported here: prefect is imported once PREFECT_HOME is set).
SITE_POOL = "yardstick-sites"
SITES = ("east", "west")
ENVS_PER_SITE = 2
DEFAULT_FAMILIES = "fingerprint,round_trip,counters,slowlog"
TARGET_RATIO = 1.2
# The nightly flow's tasks after measuring, by their names in yardstick/flows/nightly.py.
AFTER_MEASURING = (
    "compact_lake",
    "update_warehouse",
    "apply_retention",
    "render",
    "publish",
    "announce_verdicts",
)
# Imports a site's flow-run process pays (timed in fresh interpreters, after the rounds).
IMPORT_PROBES = (
    ("python -c pass", "pass"),
    ("+ import prefect.flow_engine", "import prefect.flow_engine"),
    (
        "+ yardstick/flows/sites.py and yardstick/flows/nightly.py",
        "import prefect.flow_engine, yardstick.flows.sites, yardstick.flows.nightly",
    ),
)
QUIET_PREFECT = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_LEVEL": "WARNING",
}


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any PREFECT_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(QUIET_PREFECT, **extra)
    return env


def _terminated(_signum: int, _frame: object) -> None:
    """SIGTERM ends the bench like Ctrl-C: through the finally blocks that stop every child."""
    raise KeyboardInterrupt


def _deploy(client, name: str, entrypoint: str) -> None:
    """Register a site deployment that runs the code in this repository (tests/test_sites.py)."""
    flow_name, deployment = name.split("/")
    flow_id = client.create_flow_from_name(flow_name)
    client.create_deployment(
        flow_id=flow_id,
        name=deployment,
        entrypoint=entrypoint,
        work_pool_name=SITE_POOL,
        pull_steps=[{WORKDIR_STEP: {"directory": str(REPO)}}],
    )


def _start_worker(site: str, home: Path, api_url: str) -> subprocess.Popen:
    """`prefect worker start` for one site's work queue, in its own folder and Prefect home."""
    home.mkdir(parents=True)
    env = _clean_env(
        PREFECT_API_URL=api_url,
        PREFECT_HOME=str(home / "prefect"),
        PREFECT_WORKER_QUERY_SECONDS="1",
    )
    return subprocess.Popen(
        [
            str(PREFECT),
            "worker",
            "start",
            "--pool",
            SITE_POOL,
            "--work-queue",
            site,
            "--type",
            "process",
            "--name",
            f"worker-{site}",
        ],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(home / "worker.log").open("w"),
        start_new_session=True,
    )


def _wait_for_workers(client, names: set[str], timeout_s: float = 90) -> None:
    """Until every worker has polled the pool (it then takes runs within a second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {w.name for w in client.read_workers_for_work_pool(SITE_POOL)}
        if names <= seen:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers not up after {timeout_s:.0f} s: {names - seen}")
        time.sleep(0.5)


@dataclass
class SiteTimes:
    """One site's flow run as the Prefect server recorded it (seconds after nightly() began)."""

    site: str
    created_s: float | None = None
    pending_s: float | None = None  # a worker took it
    running_s: float | None = None  # its process started the flow
    ended_s: float | None = None
    final_state: str = "?"
    hub_started_after_s: float | None = None  # SiteRun.started_after_s (hub's polling)
    measure_s: float = 0.0  # sum of its environments' EnvOutcome.duration_s
    windows_s: float = 0.0  # sum of its environments' EnvOutcome.window_s
    warnings: list[str] = field(default_factory=list)


@dataclass
class Run:
    """One nightly() call of one variant."""

    variant: str
    call_s: float
    wall_s: float  # RunSummary.wall_s (inside the flow body)
    windows_s: float
    state: str
    load: tuple[float, float, float]
    marks: dict[str, float]  # hub phases, seconds after nightly() began
    spent: dict[str, float]  # seconds in each task after measuring (compact, warehouse, ...)
    sites: list[SiteTimes] = field(default_factory=list)

    @property
    def slowest(self) -> SiteTimes | None:
        """The site whose flow run ended last."""
        ended = [s for s in self.sites if s.ended_s is not None]
        return max(ended, key=lambda s: s.ended_s) if ended else None


class Hub:
    """The nightly flow in this process, with its phases timed."""

    def __init__(self, worker_pids: list[int]) -> None:
        from yardstick.flows import nightly as nightly_module

        self.worker_pids = worker_pids
        self.module = nightly_module
        self.t0 = 0.0
        self.marks: dict[str, float] = {}
        self.parts: list = []
        self._wrap("send_sites", "sites sent")
        self._wrap("measure_environments", "local measured")
        self._wrap("wait_for_sites", "sites waited for")
        self._wrap("site_outcomes", "site outcomes read")
        # The tasks after measuring, as the flow calls them (Prefect's task engine included).
        self.spent: dict[str, float] = {}
        for name in AFTER_MEASURING:
            self._time(name)

    def _time(self, name: str) -> None:
        inner: Callable = getattr(self.module, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - start

        setattr(self.module, name, timed)

    def _wrap(self, name: str, label: str) -> None:
        inner: Callable = getattr(self.module, name)

        def timed(*args, **kwargs):
            self.marks.setdefault(f"{label}: began", time.time() - self.t0)
            try:
                result = inner(*args, **kwargs)
            finally:
                self.marks[label] = time.time() - self.t0
            if name == "send_sites":
                self.parts = result
            return result

        setattr(self.module, name, timed)

    def run(self, variant: str, config: Path, out: Path, env_site: dict[str, str]) -> Run:
        """Call nightly() as tests/test_sites.py does; time it and read back its sites."""
        self.marks, self.parts, self.spent = {}, [], {}
        self.t0 = time.time()
        start = time.perf_counter()
        stop_watch = threading.Event()
        watcher = threading.Thread(target=self._watch_flow_processes, args=(stop_watch,))
        watcher.start()
        try:
            state = self._nightly(config, out)
        finally:
            stop_watch.set()
            watcher.join()
        call_s = time.perf_counter() - start
        return self._collect(variant, state, call_s, env_site)

    def _watch_flow_processes(self, stop: threading.Event) -> None:
        """Mark the last moment any process under a worker (a site's flow run) was alive."""
        import psutil

        while not stop.wait(0.2):
            for pid in self.worker_pids:
                try:
                    alive = psutil.Process(pid).children(recursive=True)
                except psutil.Error:
                    continue
                if alive:
                    self.marks["flow-run processes last seen"] = time.time() - self.t0

    def _nightly(self, config: Path, out: Path):
        """nightly() as tests/test_sites.py calls it, its state returned."""
        return self.module.nightly(
            config_path=str(config),
            profile="quick",
            lake_dir=str(out / "lake"),
            warehouse_path=str(out / "w.duckdb"),
            out_dir=str(out / "reports"),
            start_timeout_s=120,
            return_state=True,
        )

    def _collect(self, variant: str, state, call_s: float, env_site: dict[str, str]) -> Run:
        """The run's figures: its summary, the hub's phases and each site's flow run."""
        load = os.getloadavg()
        from yardstick.flows.outcome import summary_of

        # A failed run's summary travels inside its state's exception (yardstick/flows/outcome.py).
        summary = summary_of(state.result(raise_on_failure=False))
        if isinstance(summary, BaseException):
            raise RuntimeError(f"{variant} run crashed: {state.message}") from summary
        if not state.is_completed():
            print(
                f"  warning: {variant} run ended {state.type.value}: {state.message}",
                file=sys.stderr,
            )
        run = Run(
            variant=variant,
            call_s=call_s,
            wall_s=summary.wall_s,
            windows_s=sum(o.window_s for o in summary.outcomes),
            state=state.type.value,
            load=load,
            marks=dict(self.marks),
            spent=dict(self.spent),
        )
        for part in self.parts:
            times = _site_times(part, self.t0)
            mine = [o for o in summary.outcomes if env_site.get(o.env) == part.site]
            times.measure_s = sum(o.duration_s for o in mine)
            times.windows_s = sum(o.window_s for o in mine)
            run.sites.append(times)
        return run


def _site_times(part, t0: float) -> SiteTimes:
    """A site's state changes from the server, and its warnings and errors (logs ≥ WARNING)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        LogFilter,
        LogFilterFlowRunId,
        LogFilterLevel,
    )

    times = SiteTimes(part.site, hub_started_after_s=part.started_after_s)
    if part.missing:
        times.warnings.append(f"missing: {part.missing}")
    if not part.flow_run_id:
        return times
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(part.flow_run_id)
        times.created_s = flow_run.created.timestamp() - t0 if flow_run.created else None
        times.final_state = flow_run.state.type.value if flow_run.state else "?"
        for state in sorted(
            client.read_flow_run_states(part.flow_run_id), key=lambda s: s.timestamp
        ):
            at = state.timestamp.timestamp() - t0
            kind = state.type.value
            if kind == "PENDING" and times.pending_s is None:
                times.pending_s = at
            elif kind == "RUNNING" and times.running_s is None:
                times.running_s = at
            elif state.is_final():
                times.ended_s = at
        logs = client.read_logs(
            LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[flow_run.id]),
                level=LogFilterLevel(ge_=30),
            )
        )
    times.warnings += [log.message.splitlines()[0][:160] for log in logs]
    return times


def _write_configs(work: Path, urls: list[str], families: list[str]) -> tuple[Path, Path, dict]:
    """The same 4 environments twice: all `local`, and 2 per site; and env -> site."""
    import yaml

    names = [f"cache-{site}-{i + 1}" for site in SITES for i in range(ENVS_PER_SITE)]
    sites = [site for site in SITES for _ in range(ENVS_PER_SITE)]
    local, fanned = [], []
    for name, site, url in zip(names, sites, urls, strict=True):
        env = {"name": name, "url": url, "mode": "scratch", "families": families}
        local.append(env)
        fanned.append({**env, "site": site})
    one = work / "one-run.yaml"
    one.write_text(yaml.safe_dump({"environments": local}, sort_keys=False))
    fan = work / "fan-out.yaml"
    fan.write_text(yaml.safe_dump({"environments": fanned}, sort_keys=False))
    return one, fan, dict(zip(names, sites, strict=True))


def _spread(values: list[float], fmt: str = "7.2f", unit: str = " s") -> str:
    """median [min–max]"""
    if not values:
        return "n/a"
    med = statistics.median(values)
    return f"{med:{fmt}}{unit} [{min(values):.2f}–{max(values):.2f}]"


def _median_of(values: list[float | None]) -> float | None:
    """Median of the known values."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _report(
    runs: list[Run],
    families: list[str],
    work: Path,
    setup_s: float,
    loads: list[tuple[float, float, float]],
) -> None:
    """Print the table, the ratio, the goal check and where the fan-out's extra time goes."""
    one = [r for r in runs if r.variant == "one run"]
    fan = [r for r in runs if r.variant == "fan-out"]
    print()
    print("redis-yardstick sites bench: nightly(), quick profile, 4 embedded scratch Redis")
    print(f"  families per environment: {', '.join(families)}")
    print(f"  Python {sys.version.split()[0]}, {os.cpu_count()} cores, work dir {work}")
    print(f"  set-up (Prefect server, 4 redis-servers, 2 workers, warm-up run): {setup_s:.1f} s")
    print(
        "  note: the 4 loopback environments form one host group: the one-run variant "
        "measures them one after another; the fan-out's two sites measure side by side"
    )
    print()
    print(
        f"  {'round':>5}  {'variant':<8} {'nightly()':>9} {'in-flow':>8} {'windows':>8}"
        f" {'slowest site (windows)':>24} {'state':>10}  load 1/5/15 min"
    )
    for index, run in enumerate(runs):
        slow = run.slowest
        slow_text = f"{slow.site} ({slow.windows_s:.2f} s)" if slow else ""
        print(
            f"  {index // 2 + 1:>5}  {run.variant:<8} {run.call_s:8.2f}s {run.wall_s:7.2f}s"
            f" {run.windows_s:7.2f}s {slow_text:>24} {run.state:>10}"
            f"  {run.load[0]:.2f} {run.load[1]:.2f} {run.load[2]:.2f}"
        )
    print()
    ratios = [f.call_s / o.call_s for o, f in zip(one, fan, strict=False)]
    in_flow_ratios = [f.wall_s / o.wall_s for o, f in zip(one, fan, strict=False)]
    slow_windows = [r.slowest.windows_s for r in fan if r.slowest]
    print(f"  one run  nightly() wall          {_spread([r.call_s for r in one])}")
    print(f"  fan-out  nightly() wall          {_spread([r.call_s for r in fan])}")
    print(f"  one run  in-flow wall            {_spread([r.wall_s for r in one])}")
    print(f"  fan-out  in-flow wall            {_spread([r.wall_s for r in fan])}")
    print(f"  windows, all 4 environments      {_spread([r.windows_s for r in fan])}")
    print(f"  windows of the slowest site      {_spread(slow_windows)}")
    print(f"  fan-out ÷ one run (per round)    {_spread(ratios, '7.3f', '')}")
    print(f"  same, in-flow walls              {_spread(in_flow_ratios, '7.3f', '')}")
    if ratios and slow_windows:
        one_s = statistics.median([r.call_s for r in one])
        allowance = statistics.median(slow_windows) / one_s
        ratio = statistics.median(ratios)
        verdict = "met" if ratio <= TARGET_RATIO + allowance else "NOT met"
        print(
            f"  goal: ≤ {TARGET_RATIO} + slowest site's windows ÷ one-run wall "
            f"= {TARGET_RATIO} + {allowance:.3f} = {TARGET_RATIO + allowance:.3f}: "
            f"{ratio:.3f}, {verdict}"
        )
    all_loads = loads + [r.load for r in runs]
    print(
        f"  load average 1 min during the bench: {min(la[0] for la in all_loads):.2f}–"
        f"{max(la[0] for la in all_loads):.2f} (on {os.cpu_count()} cores)"
    )
    _timeline(one, fan)


def _timeline(one: list[Run], fan: list[Run]) -> None:
    """Medians of when things happened, in seconds after nightly() was called."""
    print()
    print("  where the time goes (medians, seconds after nightly() was called):")
    rows: list[tuple[str, float | None]] = []
    rows.append(
        (
            "one run: local environments measured",
            _median_of([r.marks.get("local measured") for r in one]),
        )
    )
    rows.append(
        (
            "one run: a site flow-run process still alive (previous fan-out)",
            _median_of([r.marks.get("flow-run processes last seen") for r in one]),
        )
    )
    rows.append(
        (
            "one run: nightly() returned (compact, warehouse, reports, events)",
            _median_of([r.call_s for r in one]),
        )
    )
    rows.append(
        (
            "fan-out: sites sent (run_deployment × 2) began",
            _median_of([r.marks.get("sites sent: began") for r in fan]),
        )
    )
    rows.append(
        ("fan-out: sites sent, returned", _median_of([r.marks.get("sites sent") for r in fan]))
    )
    for site in SITES:
        times = [s for r in fan for s in r.sites if s.site == site]
        rows += [
            (f"  {site}: flow run created (server)", _median_of([s.created_s for s in times])),
            (f"  {site}: taken by its worker (PENDING)", _median_of([s.pending_s for s in times])),
            (
                f"  {site}: flow running in its process (RUNNING)",
                _median_of([s.running_s for s in times]),
            ),
            (
                f"  {site}: hub saw it started (SiteRun.started_after_s)",
                _median_of([s.hub_started_after_s for s in times]),
            ),
            (f"  {site}: ended (server)", _median_of([s.ended_s for s in times])),
        ]
    rows += [
        (
            "fan-out: hub done waiting (wait_for_sites returned)",
            _median_of([r.marks.get("sites waited for") for r in fan]),
        ),
        (
            "fan-out: last site flow-run process gone (0.2 s sampling)",
            _median_of([r.marks.get("flow-run processes last seen") for r in fan]),
        ),
        (
            "fan-out: site outcomes read from the lake",
            _median_of([r.marks.get("site outcomes read") for r in fan]),
        ),
        (
            "fan-out: nightly() returned (compact, warehouse, reports, events)",
            _median_of([r.call_s for r in fan]),
        ),
    ]
    for label, value in rows:
        print(f"    {label:<68} {'n/a' if value is None else f'{value:7.2f} s'}")
    print()
    print("  per site (medians over rounds):")
    for site in SITES:
        times = [s for r in fan for s in r.sites if s.site == site]

        def gap(a: str, b: str, times: list[SiteTimes] = times) -> str:
            values = [
                getattr(s, b) - getattr(s, a)
                for s in times
                if getattr(s, a) is not None and getattr(s, b) is not None
            ]
            return _spread(values)

        rows = [
            ("queue wait (created → taken by worker)", gap("created_s", "pending_s")),
            ("flow-run process start-up (taken → RUNNING)", gap("pending_s", "running_s")),
            ("RUNNING → ended", gap("running_s", "ended_s")),
            ("of which measuring (sum of duration_s)", _spread([s.measure_s for s in times])),
            ("of which measurement windows", _spread([s.windows_s for s in times])),
        ]
        for label, text in rows:
            print(f"    {site + ': ' + label:<56} {text}")
    lags = [
        r.marks["sites waited for"] - max(s.ended_s for s in r.sites)
        for r in fan
        if r.sites and "sites waited for" in r.marks and all(s.ended_s for s in r.sites)
    ]
    label = "hub's polling lag (last site ended → wait returned)"
    print(f"    {label:<56} {_spread(lags)}")
    build_one = [r.call_s - r.marks["local measured"] for r in one if "local measured" in r.marks]
    build_fan = [
        r.call_s - r.marks["site outcomes read"] for r in fan if "site outcomes read" in r.marks
    ]
    print(
        f"    after measuring: one run {_spread(build_one)}, fan-out {_spread(build_fan)}"
        " (compact, warehouse, reports, events, flow end)"
    )
    for name in AFTER_MEASURING:
        label = f"  task {name}"
        print(
            f"    {label:<56} one run {_spread([r.spent.get(name, 0.0) for r in one])},"
            f" fan-out {_spread([r.spent.get(name, 0.0) for r in fan])}"
        )
    warnings = sorted({w for r in fan for s in r.sites for w in s.warnings})
    if warnings:
        print()
        print("  site flow runs' warnings and errors (Prefect logs ≥ WARNING):")
        for text in warnings[:12]:
            print(f"    {text}")


def _import_costs() -> None:
    """What a fresh flow-run process pays in imports alone (once each, on this machine now)."""
    print()
    print("  a fresh interpreter's imports (what each site's flow-run process pays):")
    for label, code in IMPORT_PROBES:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=_clean_env(),
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        print(f"    {label:<56} {time.perf_counter() - start:7.2f} s")


def _worker_log_findings(work: Path) -> None:
    """Print the lines of each worker's log that look like trouble."""
    print()
    for site in SITES:
        log = work / f"site-{site}" / "worker.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        bad = [
            line
            for line in lines
            if any(word in line for word in ("ERROR", "Traceback", "WARNING", "CRITICAL"))
        ]
        print(f"  worker {site} log: {len(lines)} lines, {len(bad)} warning/error lines ({log})")
        for line in bad[:8]:
            print(f"    {line[:200]}")


def main() -> int:
    harness = Bench(
        "sites", __doc__, rounds=3, tiny="1 round, fingerprint only, no warm-up or import timings"
    )
    parser = harness.parser
    parser.add_argument(
        "--families",
        default=DEFAULT_FAMILIES,
        help=f"families per environment (default {DEFAULT_FAMILIES})",
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the untimed one-run warm-up (dbt parse, imports)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = harness.parse()
    if args.tiny:
        args.rounds, args.families, args.no_warmup = 1, "fingerprint", True
    families = [f.strip() for f in args.families.split(",") if f.strip()]

    signal.signal(signal.SIGTERM, _terminated)
    work = Path(tempfile.mkdtemp(prefix="yardstick-sites-bench-"))
    started = time.perf_counter()
    stack = ExitStack()
    workers: list[subprocess.Popen] = []
    redis_servers: list = []
    try:
        # This process is the hub: pointed at the server (Prefect reads its settings when
        # imported, which starting the server does: the settings go in with it).
        hub = {**QUIET_PREFECT, "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore"}
        callers_dbt_state = os.environ.get("YARDSTICK_DBT_STATE")  # the server clears it
        server = stack.enter_context(prefect_server(work / "server", use_here=True, settings=hub))
        api_url = server.api_url
        # A dbt state of its own: no lock shared with test runs on this machine. --tiny keeps
        # the caller's (the tests' cache: the runs' warehouses, w.duckdb as the tests' are,
        # start from the empty warehouse and plan kept there, not from a cold dbt build).
        shared_dbt = args.tiny and callers_dbt_state
        os.environ["YARDSTICK_DBT_STATE"] = shared_dbt or str(work / "dbt-state")

        from prefect.client.orchestration import get_client
        from prefect.client.schemas.actions import WorkPoolCreate

        from yardstick.flows.sites import SITE_DEPLOYMENT
        from yardstick.host.embedded import RedisProcess

        for _ in range(len(SITES) * ENVS_PER_SITE):
            redis_servers.append(RedisProcess().start())
        one_config, fan_config, env_site = _write_configs(
            work, [s.url for s in redis_servers], families
        )
        with get_client(sync_client=True) as client:
            client.create_work_pool(WorkPoolCreate(name=SITE_POOL, type="process"), overwrite=True)
            _deploy(client, SITE_DEPLOYMENT, "yardstick/flows/sites.py:measure_site")
            workers = [_start_worker(site, work / f"site-{site}", api_url) for site in SITES]
            _wait_for_workers(client, {f"worker-{site}" for site in SITES})
        hub = Hub([worker.pid for worker in workers])
        loads = [os.getloadavg()]
        if not args.no_warmup:
            print("warm-up: one untimed one-run nightly (dbt parse, first imports) ...", flush=True)
            hub.run("warm-up", one_config, work / "warm-up", env_site)
        setup_s = time.perf_counter() - started
        runs: list[Run] = []
        for index in range(args.rounds):
            # Alternate which variant goes first: drift in the machine's load hits both.
            order = [("one run", one_config), ("fan-out", fan_config)]
            if index % 2:
                order.reverse()
            done = {}
            for variant, config in order:
                loads.append(os.getloadavg())
                print(f"round {index + 1}/{args.rounds}: {variant} ...", end=" ", flush=True)
                run = hub.run(
                    variant, config, work / f"r{index + 1}-{variant.replace(' ', '-')}", env_site
                )
                print(f"{run.call_s:.2f} s ({run.state})", flush=True)
                done[variant] = run
            runs += [done["one run"], done["fan-out"]]
        _report(runs, families, work, setup_s, loads)
        for variant in ("one run", "fan-out"):
            walls = [r.call_s for r in runs if r.variant == variant]
            harness.figure(f"{variant}/wall_s", statistics.median(walls), "s")
        ratios = [f.call_s / o.call_s for o, f in zip(runs[::2], runs[1::2], strict=True)]
        harness.figure("fan_out_over_one_run", statistics.median(ratios), "ratio", TARGET_RATIO)
        harness.write(
            args.json,
            {"families": families, "setup_s": setup_s,
             "runs": [{"variant": r.variant, "call_s": r.call_s, "wall_s": r.wall_s,
                       "windows_s": r.windows_s, "state": r.state} for r in runs]},
        )  # fmt: skip
        if not args.tiny:  # three cold interpreters, printed only: not at the test size
            _import_costs()
        _worker_log_findings(work)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping workers, servers and redis-servers", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish cleaning up
        for worker in workers:
            stop_tree(worker)
        for redis_server in redis_servers:
            redis_server.stop()
        stack.close()
        print(f"  bench wall time: {time.perf_counter() - started:.1f} s", file=sys.stderr)
        if args.keep:
            print(f"  kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
