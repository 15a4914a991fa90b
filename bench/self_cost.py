"""What the tool costs beside what it measures: `yardstick run` on the embedded default (no
environments file: a scratch redis-server it starts, and its socat twin), as a user starts it.

    .venv/bin/python bench/self_cost.py [--profile quick] [--rounds 1] [--root DIR] [--json PATH]
        [--compare-to WORKTREE] [--env NAME ...] [--tiny]

Each run is a fresh `yardstick` process (no PREFECT_* setting inherited: a one-shot run, no
Prefect server) with its own lake, warehouse and reports. Per run:

- P2: measurement windows ÷ the process's wall, the windows being the steps' `window_s` in
  the lake (every environment of the run); the issue's target is ≥ 75 % on a quiet machine;
- the tool's own CPU-seconds by phase, from the run's `tool_cost` rows (yardstick/host/
  selfcost.py: start, measure, landing, warehouse, rendering, total), and the measurement
  tools' (redis-benchmark, redis-cli, the embedded server: `children_cpu_s`);
- the whole process tree's CPU as the kernel counted it for this bench's child (wait4), which
  the tool's own rows must stay within;
- the CPU share of the tool on the machine it measured: its CPU-seconds ÷ (wall × cores),
  against the machine's busy share from /proc/stat over the same run (every process).

`--compare-to WORKTREE` (a `git worktree` of an earlier commit, e.g. before issue 36) runs the
same command with that code too, rounds interleaved: the earlier code has no `tool_cost`, so
the comparison is all-in (the process tree's CPU per second measured, the tools it ran and
any Prefect server it started included).

Walls follow the machine's load: the JSON records the load average before and after each run;
CPU-seconds and same-run ratios are what carry across load."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402 - beside this file, not a package
from collect_round import CLI_CALL, overlay  # noqa: E402

from yardstick.host.selfcost import host_busy_s  # noqa: E402
from yardstick.storage import delta  # noqa: E402
from yardstick.storage.lakefs import Lake  # noqa: E402

TARGET_P2 = 0.75
RUN_PHASES = ("start", "measure", "landing", "warehouse", "rendering")


def one_run(
    work: Path,
    profile: str,
    code: Path | None = None,
    env_names: tuple[str, ...] = (),
    warehouse: str = "warehouse.duckdb",
) -> dict:
    """One `yardstick run` in `work` (with the code in `code` first on the path, if given; only
    the embedded default's `env_names` when given; its warehouse file named `warehouse`); its
    figures."""
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.pop("PYTHONPATH", None)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    args = [
        sys.executable,
        "-c",
        CLI_CALL,
        "run",
        "--profile",
        profile,
        "--lake",
        str(work / "lake"),
        "--warehouse",
        str(work / warehouse),
        "--out",
        str(work / "out"),
        "--state-dir",
        str(work / "state"),
        "--format",
        "json",
        *(arg for name in env_names for arg in ("--env", name)),
    ]
    load_before = _harness.load_average()
    busy_before = host_busy_s()
    start = time.perf_counter()
    proc = subprocess.Popen(
        args, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = proc.communicate()
    wall_s = time.perf_counter() - start
    busy_after = host_busy_s()
    # Every child reaped so far (main() keeps the difference): what the kernel saw.
    usage = _children_cpu_s()
    if proc.returncode != 0:
        raise SystemExit(f"yardstick run failed ({proc.returncode}):\n{err[-3000:]}")
    steps = delta.read(
        Lake.at(work / "lake"), "steps", columns=["run_id", "env", "window_s"]
    ).to_pylist()
    run_id = steps[0]["run_id"]
    windows_s = sum(s["window_s"] or 0.0 for s in steps if s["run_id"] == run_id)
    present = delta.tables_present(Lake.at(work / "lake"))
    cost = (
        [
            r
            for r in delta.read(Lake.at(work / "lake"), "tool_cost").to_pylist()
            if r["run_id"] == run_id
        ]
        if "tool_cost" in present
        else []  # an earlier code's run
    )
    by_phase = {r["phase"]: r for r in cost if r["run_wide"] and r["cpu_scope"] == "process"}
    total = by_phase.get("total", {})
    cores = os.cpu_count() or 1
    tool_cpu_s = total.get("cpu_s")
    host_busy_cpu_s = (
        busy_after - busy_before if busy_after is not None and busy_before is not None else None
    )
    return {
        "run_id": run_id,
        "profile": profile,
        "environments": sorted({s["env"] for s in steps if s["run_id"] == run_id}),
        "process_wall_s": wall_s,
        "windows_s": windows_s,
        "p2_windows_over_wall": windows_s / wall_s,
        "tool_cpu_s_by_phase": {p: by_phase[p]["cpu_s"] for p in RUN_PHASES if p in by_phase},
        "tool_wall_s_by_phase": {p: by_phase[p]["wall_s"] for p in RUN_PHASES if p in by_phase},
        "peak_rss_bytes_by_phase": {
            p: by_phase[p]["peak_rss_bytes"] for p in RUN_PHASES if p in by_phase
        },
        "tool_cpu_s": tool_cpu_s,
        "tool_wall_s": total.get("wall_s"),
        "measurement_tools_cpu_s": total.get("children_cpu_s"),
        "families_cpu_s": {
            f"{r['env']}/{r['family']}": r["cpu_s"] for r in cost if r["phase"] == "family"
        },
        "families_children_cpu_s": {
            f"{r['env']}/{r['family']}": r["children_cpu_s"] for r in cost if r["phase"] == "family"
        },
        "process_tree_cpu_s": usage,  # main() turns it into this run's
        "code": str(code) if code else "this tree",
        "tool_cpu_per_window_s": tool_cpu_s / windows_s if tool_cpu_s and windows_s else None,
        "cores": cores,
        # The tool's share of the machine: its CPU over every core's time through the run.
        "tool_share_of_cores": tool_cpu_s / (wall_s * cores) if tool_cpu_s is not None else None,
        "host_busy_cpu_s": host_busy_cpu_s,
        "host_busy_share": host_busy_cpu_s / (wall_s * cores) if host_busy_cpu_s else None,
        "tool_share_of_host_busy": (
            tool_cpu_s / host_busy_cpu_s if tool_cpu_s and host_busy_cpu_s else None
        ),
        "load_before": load_before,
        "load_after": _harness.load_average(),
    }


def _children_cpu_s() -> float:
    """CPU-seconds of every child this process reaped so far, their descendants included
    (main() takes the difference around each run)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _line(figures: dict) -> str:
    """One run's figures for a human."""
    if figures["tool_cpu_s"] is None:  # an earlier code: all-in only
        return (
            f"[{figures['code']}] {figures['windows_s']:.1f} s of windows in "
            f"{figures['process_wall_s']:.1f} s of process: P2 "
            f"{figures['p2_windows_over_wall']:.0%}; process tree "
            f"{figures['process_tree_cpu_s']:.1f} CPU-s "
            f"({figures['all_in_cpu_per_window_s']:.2f} per second measured); load "
            f"{figures['load_before']['load_1m']:.1f} -> {figures['load_after']['load_1m']:.1f}"
        )
    phases = ", ".join(f"{p} {s:.2f}" for p, s in figures["tool_cpu_s_by_phase"].items())
    return (
        f"{figures['windows_s']:.1f} s of windows in {figures['process_wall_s']:.1f} s of "
        f"process: P2 {figures['p2_windows_over_wall']:.0%} (target >= {TARGET_P2:.0%} quiet); "
        f"tool {figures['tool_cpu_s']:.1f} CPU-s ({phases}), measurement tools "
        f"{figures['measurement_tools_cpu_s']:.1f} CPU-s, process tree "
        f"{figures['process_tree_cpu_s']:.1f} CPU-s "
        f"({figures['all_in_cpu_per_window_s']:.2f} per second measured); the tool kept "
        f"{figures['tool_share_of_cores']:.1%} of the cores busy, the machine "
        f"{(figures['host_busy_share'] or 0):.1%}; load {figures['load_before']['load_1m']:.1f}"
        f" -> {figures['load_after']['load_1m']:.1f}"
    )


def main() -> None:
    harness = _harness.Bench("self_cost", __doc__, rounds=1, tiny="1 run, its direct environment")
    parser = harness.parser
    parser.add_argument("--profile", default="quick", help="the run's profile (quick: P2)")
    parser.add_argument("--root", default=tempfile.gettempdir(), help="where runs write")
    parser.add_argument("--compare-to", type=Path, help="a worktree of an earlier commit")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        help="only this environment of the embedded default (repeat; default: both)",
    )
    args = harness.parse()
    if args.tiny:  # the forwarded twin left out: the CI's time
        args.rounds, args.env = 1, args.env or ["embedded"]

    # --tiny: the warehouse named as the tests' are, so that a run under the tests' dbt cache
    # (YARDSTICK_DBT_STATE, inherited) starts from the empty warehouse and plan kept there
    # (yardstick/storage/kept.py) as a user's second warehouse does, not from a cold dbt build.
    warehouse = "w.duckdb" if args.tiny else "warehouse.duckdb"
    root = Path(tempfile.mkdtemp(prefix="self-cost-", dir=args.root))
    codes: dict[str, Path | None] = {"this": None}
    if args.compare_to:
        codes["other"] = overlay(args.compare_to.resolve(), root / "other-code")
    runs, others = [], []
    reaped_s = _children_cpu_s()
    for index in range(args.rounds):
        # Rounds interleaved, the order rotated, so drift in the machine's load spreads.
        order = list(codes) if index % 2 == 0 else list(reversed(codes))
        for name in order:
            work = root / f"{name}-{index}"
            figures = one_run(work, args.profile, codes[name], tuple(args.env), warehouse)
            now = figures["process_tree_cpu_s"]
            figures["process_tree_cpu_s"], reaped_s = now - reaped_s, now
            figures["all_in_cpu_per_window_s"] = (
                figures["process_tree_cpu_s"] / figures["windows_s"]
                if figures["windows_s"]
                else None
            )
            (runs if name == "this" else others).append(figures)
            print(f"run {index + 1} ({name}): {_line(figures)}")
    summary = {
        "p2_median": statistics.median(r["p2_windows_over_wall"] for r in runs),
        "tool_cpu_s_median": statistics.median(r["tool_cpu_s"] or 0.0 for r in runs),
        "tool_cpu_per_window_s_median": statistics.median(
            r["tool_cpu_per_window_s"] or 0.0 for r in runs
        ),
        "target_p2": TARGET_P2,
        "all_in_cpu_per_window_s_median": statistics.median(
            r["all_in_cpu_per_window_s"] or 0.0 for r in runs
        ),
    }
    if others:
        summary["compare_to"] = {
            "worktree": str(args.compare_to),
            "p2_median": statistics.median(r["p2_windows_over_wall"] for r in others),
            "all_in_cpu_per_window_s_median": statistics.median(
                r["all_in_cpu_per_window_s"] or 0.0 for r in others
            ),
            "process_tree_cpu_s_median": statistics.median(r["process_tree_cpu_s"] for r in others),
        }
    print(
        f"P2 median {summary['p2_median']:.0%} over {len(runs)} run(s), tool "
        f"{summary['tool_cpu_per_window_s_median']:.2f} CPU-s per second measured"
    )
    harness.figure("p2", summary["p2_median"], "share", TARGET_P2, better="higher")
    harness.figure("tool_cpu_s", summary["tool_cpu_s_median"], "CPU-s")
    harness.figure("tool_cpu_per_window_s", summary["tool_cpu_per_window_s_median"], "CPU-s/s")
    harness.figure("all_in_cpu_per_window_s", summary["all_in_cpu_per_window_s_median"], "CPU-s/s")
    harness.write(args.json, {"runs": runs, "compared": others, "summary": summary, "root": root})


if __name__ == "__main__":
    main()
