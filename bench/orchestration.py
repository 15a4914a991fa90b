"""Orchestration overhead of the quick profile: wall time against time inside measurement windows.

Runs the nightly flow (quick profile, embedded scratch Redis) the way `yardstick run` does, with
Prefect's state in a throwaway directory, and prints where the wall time goes. The issue's target:
the quick profile's wall time ÷ the sum of its measurement windows ≤ 1.2.

    .venv/bin/python bench/orchestration.py [--repeat N] [--keep]

Any PREFECT_* variable of the calling shell is ignored, so every run measures what a first
`yardstick run` on a laptop pays: an ephemeral Prefect server started by this process.
"""

from __future__ import annotations

import os
import time

_T0 = time.perf_counter()


def _process_age_s() -> float:
    """Seconds since this process was created (interpreter start-up included), on Linux."""
    try:
        start_ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        uptime_s = float(open("/proc/uptime").read().split()[0])
        return max(uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


_AGE_AT_T0 = _process_age_s()

import argparse  # noqa: E402
import functools  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

TARGET_RATIO = 1.2


def now_s() -> float:
    """Seconds since this process was created."""
    return _AGE_AT_T0 + time.perf_counter() - _T0


class Timings:
    """Accumulated wall time per label, from wrapped functions (thread-safe)."""

    def __init__(self) -> None:
        self.total_s: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def wrap(self, owner: object, name: str, label: str) -> None:
        """Replace owner.name by a timed version of itself."""
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                with self._lock:
                    self.total_s[label] += time.perf_counter() - start
                    self.calls[label] += 1

        setattr(owner, name, timed)

    def reset(self) -> None:
        self.total_s.clear()
        self.calls.clear()


def _isolated_prefect(state_dir: Path) -> None:
    """Forget the shell's Prefect settings, then configure it as the CLI does."""
    for key in [k for k in os.environ if k.startswith("PREFECT_")]:
        del os.environ[key]
    os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
    from yardstick.app.runtime import configure_prefect

    configure_prefect(state_dir)


def _steps(lake_dir: Path, run_id: str) -> list[dict]:
    """This run's steps rows (family, status, duration_s, window_s) from the lake."""
    from yardstick.storage import lake

    return lake.read(lake_dir, "steps", run_ids={run_id}).to_pylist()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="flow runs in this process")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="yardstick-orchestration-bench-"))
    _isolated_prefect(work / "state")
    marks = {"imports": 0.0}

    start = now_s()
    from prefect import get_client

    import yardstick.host.embedded
    import yardstick.storage.warehouse
    from yardstick.flows import nightly as nightly_module
    from yardstick.flows.nightly import nightly

    marks["imports"] = now_s() - start

    timings = Timings()
    timings.wrap(
        yardstick.host.embedded, "newest_redis_server", "embedded: find newest redis-server"
    )
    timings.wrap(yardstick.host.embedded.RedisProcess, "start", "embedded redis-server start")
    timings.wrap(yardstick.host.embedded.RedisProcess, "stop", "embedded redis-server stop")
    timings.wrap(yardstick.storage.warehouse, "build", "warehouse build")
    timings.wrap(nightly_module, "render_reports", "report render")
    timings.wrap(nightly_module, "create_markdown_artifact", "Prefect artifacts")
    timings.wrap(nightly_module.lake, "write", "lake writes")

    # The first API call starts the ephemeral server; doing it here separates its cost.
    start = now_s()
    with get_client(sync_client=True) as client:
        client.hello()
    marks["prefect server start"] = now_s() - start

    runs = []
    for index in range(args.repeat):
        timings.reset()
        out = work / f"run{index}"
        start = now_s()
        state = nightly(
            profile="quick",
            lake_dir=str(out / "lake"),
            warehouse_path=str(out / "w.duckdb"),
            out_dir=str(out / "reports"),
            return_state=True,
        )
        call_s = now_s() - start
        from yardstick.flows.outcome import summary_of

        # A failed run's summary travels inside its state's exception (flows/outcome.py).
        summary = summary_of(state.result(raise_on_failure=False))
        if isinstance(summary, BaseException):
            print(f"flow run {index + 1} crashed: {state.message}", file=sys.stderr)
            return 1
        if not state.is_completed():
            # Still timed: a failed family shortens the run, so say it next to the figures.
            print(f"warning: flow run {index + 1}: {state.message}", file=sys.stderr)
        runs.append((call_s, summary, dict(timings.total_s), _steps(out / "lake", summary.run_id)))

    # The ephemeral server would otherwise stop at interpreter exit, outside the figures.
    from prefect.server.api.server import SubprocessASGIServer

    start = now_s()
    SubprocessASGIServer().stop()
    marks["prefect server stop"] = now_s() - start
    total_s = now_s()
    print("redis-yardstick orchestration bench: nightly flow, quick profile, embedded Redis")
    print(f"  Python {sys.version.split()[0]}, {os.cpu_count()} cores, work dir {work}")
    print()
    before_flows = total_s - sum(r[0] for r in runs)
    print(
        f"  outside flow calls: {before_flows:.2f} s, of which imports {marks['imports']:.2f} s,"
        f" Prefect server start {marks['prefect server start']:.2f} s,"
        f" stop {marks['prefect server stop']:.2f} s"
    )
    for index, (call_s, summary, timed, steps) in enumerate(runs, 1):
        windows_s = sum(o.window_s for o in summary.outcomes)
        measuring_s = sum(o.duration_s for o in summary.outcomes)
        print()
        print(f"  flow run {index} ({summary.run_id}):")
        print(f"    nightly() call                     {call_s:7.2f} s")
        print(f"    in-flow wall (RunSummary.wall_s)   {summary.wall_s:7.2f} s")
        print(f"    sum of measurement windows         {windows_s:7.2f} s")
        print(f"    in-flow wall ÷ windows             {summary.wall_s / windows_s:7.2f}")
        print(f"    call ÷ windows                     {call_s / windows_s:7.2f}")
        print("    where the time goes:")
        rows = [
            ("outside the flow body (run creation, states, engine)", call_s - summary.wall_s),
            ("measure-environment tasks (EnvOutcome.duration_s)", measuring_s),
        ]
        for step in steps:
            label = f"  {step['env']}: {step['family']} ({step['status']})"
            rows.append((f"{label}: window {step['window_s']:.2f} s", step["duration_s"]))
        rows += [(label, seconds) for label, seconds in sorted(timed.items())]
        accounted = measuring_s + sum(s for label, s in timed.items() if label != "lake writes")
        rows.append(
            (
                "rest of the flow body (task submission, futures, logging)",
                summary.wall_s - accounted,
            )
        )
        for label, seconds in rows:
            print(f"      {label:<58} {seconds:7.2f} s")
    windows_all = sum(o.window_s for r in runs for o in r[1].outcomes)
    in_flow_all = sum(r[1].wall_s for r in runs)
    print()
    print(
        f"  total process wall time              {total_s:7.2f} s"
        f"   (from process creation, ephemeral server stopped)"
    )
    print(
        f"  in-flow wall ÷ windows               {in_flow_all / windows_all:7.2f}"
        f"   (target ≤ {TARGET_RATIO})"
    )
    print(f"  total ÷ windows                      {total_s / windows_all:7.2f}")
    print(
        f"  Prefect server start share of total  "
        f"{100 * marks['prefect server start'] / total_s:6.1f} %"
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
