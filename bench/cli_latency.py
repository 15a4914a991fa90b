"""P8 of issue 36: how long the commands that should answer at once take, and what they import.

`-h`, `--version`, `run -h`, a bad environments file, a bad flag, `trend` and `changes` on a
built warehouse: each run N times in a fresh process, as a user runs `yardstick`; per command
the median wall, the median CPU-seconds and peak RSS of the process (os.wait4: the child's own
rusage, what getrusage(RUSAGE_CHILDREN) adds up), its exit code and stderr's line count, and,
from one more run (--tiny: from its one run), which heavy modules it imported (Prefect, dbt,
the families, the flows, matplotlib, jinja2, deltalake, ruptures, scipy). Target: <= 1 s wall
each on a quiet machine. --tiny keeps the caller's dbt cache (YARDSTICK_DBT_STATE) if set.

`--tree LABEL=DIR` measures the CLI of another checkout side by side, rounds interleaved
(e.g. the commit before the light CLI: `git archive 432aaae | tar -x -C /tmp/cli-before`,
then `--tree before=/tmp/cli-before`). The warehouse is built once from a synthetic lake
(tests/lakes.py: nights of one environment, a step in its round trip), or `--warehouse FILE`.

    .venv/bin/python bench/cli_latency.py [--rounds 7] [--tiny] [--tree before=DIR] [--json PATH]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Bench, interleaved, load_line  # noqa: E402 - beside this file

ENV = "bench-cli"
FIGURE = "rtt_client_p99_us"
# Module prefixes none of these commands should import (issue 36, "Answer at once").
HEAVY = (
    "prefect",
    "dbt",
    "yardstick.tasks",
    "yardstick.flows",
    "matplotlib",
    "jinja2",
    "deltalake",
    "ruptures",
    "scipy",
)
# Runs one checkout's CLI: argv[1] is the checkout ("" = the installed one), argv[2] a file
# for the imported modules ("" = none), the rest the command line. A checkout's folders map
# to the package as the editable install maps this one's (pyproject.toml, package-dir).
BOOT = r"""
import sys
root, modules_file = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
if root:
    import importlib.util, os
    FOLDERS = {"yardstick": "yardstick", "yardstick.flows": "flows", "yardstick.tasks": "tasks",
               "yardstick.reports": "reports", "yardstick.sql": "sql"}
    class Checkout:
        @staticmethod
        def find_spec(name, path=None, target=None):
            folder = os.path.join(root, FOLDERS.get(name, "\0"))
            if os.path.isfile(os.path.join(folder, "__init__.py")):
                return importlib.util.spec_from_file_location(
                    name, os.path.join(folder, "__init__.py"),
                    submodule_search_locations=[folder])
            return None
    sys.meta_path.insert(0, Checkout)
if modules_file:
    import atexit
    def facts():
        # VmHWM: this process's own peak (rusage's maxrss counts the parent's pages at fork).
        peak = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")]
        open(modules_file, "w").write("\n".join([*peak, *sorted(sys.modules)]))
    atexit.register(facts)
sys.argv[0] = "yardstick"
from yardstick.app.cli import app
app(prog_name="yardstick")
"""


def build_warehouse(work: Path, nights: int, name: str = "warehouse.duckdb") -> Path:
    """A warehouse of `nights` nightly runs of one environment (round trip, fingerprint), its
    RTT stepping up by a third two thirds of the way: trend has a series with a change point."""
    import random

    from lakes import digest, fingerprint, new_run, ping, runs_row, steps

    from yardstick.storage import warehouse
    from yardstick.storage.lakefs import Lake

    lake_dir = work / "lake"
    rng = random.Random(36)
    start = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
    for night in range(nights):
        run = new_run(lake_dir, ENV, start + timedelta(days=night))
        steps(run, {"fingerprint": None, "round_trip": digest("nightly", "round_trip")})
        runs_row(run, "nightly")
        fingerprint(run)
        ping(run, rtt_us=60.0 if night < nights * 2 // 3 else 80.0, rng=rng)
    path = work / name
    warehouse.build(Lake.at(lake_dir), path)
    return path


def commands(work: Path, warehouse: Path, env_name: str) -> dict[str, tuple[list[str], set[int]]]:
    """Each command measured: its arguments and the exit codes it may end with."""
    bad = work / "bad.yaml"
    bad.write_text("environments:\n  - name: a\n    url: redis://127.0.0.1:1/0\n    colour: red\n")
    paths = ["--lake", str(work / "no-lake"), "--warehouse", str(work / "no.duckdb"),
             "--out", str(work / "no-out"), "--state-dir", str(work / "no-state")]  # fmt: skip
    return {
        "help": (["-h"], {0}),
        "version": (["--version"], {0}),
        "run_help": (["run", "-h"], {0}),
        "bad_file": (["run", "--config", str(bad), *paths], {2}),
        "bad_flag": (["run", "--profile", "weekly", *paths], {2}),
        "trend": (
            ["trend", "--env", env_name, "--figure", FIGURE, "--warehouse", str(warehouse)],
            {0},
        ),
        # 1: a regression is listed (the step is one).
        "changes": (["changes", "--warehouse", str(warehouse)], {0, 1}),
    }


def run_once(root: str, args: list[str], cwd: Path, env: dict[str, str], modules: str = ""):
    """One process: (wall s, CPU s, exit code, stderr)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, root, modules, *args],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
        )  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        wall_s = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    cpu_s = usage.ru_utime + usage.ru_stime
    return wall_s, cpu_s, proc.returncode, stderr


def measured_with_imports(root: str, args: list[str], cwd: Path, env: dict[str, str]):
    """One run of the command: its sample (run_once's) and (the HEAVY module families it
    imported, its peak RSS)."""
    with tempfile.NamedTemporaryFile("r", suffix=".modules") as listing:
        sample = run_once(root, args, cwd, env, listing.name)
        peak_kib, *names = listing.read().split() or ["0"]
    heavy = sorted({h for h in HEAVY for n in names if n == h or n.startswith(h + ".")})
    return sample, (heavy, int(peak_kib) * 1024)


def imports_and_peak(root: str, args: list[str], cwd: Path, env: dict[str, str]):
    """One more run of the command: the HEAVY module families it imported, its peak RSS."""
    return measured_with_imports(root, args, cwd, env)[1]


def main() -> None:
    """Measure every command on every checkout, print a table, write the JSON."""
    harness = Bench("cli_latency", __doc__, rounds=7, tiny="1 round, 9 nights")
    harness.add_argument("--nights", type=int, default=30, help="nights in the built warehouse")
    harness.add_argument("--warehouse", type=Path, help="an existing warehouse (with --env-name)")
    harness.add_argument("--env-name", default=ENV, help="its environment for `trend`")
    harness.add_argument(
        "--tree", action="append", default=[], metavar="LABEL=DIR",
        help="also measure the CLI of this checkout (repeat for more)",
    )  # fmt: skip
    harness.add_argument("--root", type=Path, default=Path("/work/bench-tmp"))
    harness.add_argument("--keep", action="store_true", help="keep the work folder")
    args = harness.parse()
    rounds, nights = (1, 9) if args.tiny else (args.rounds, args.nights)
    trees = {"here": ""} | dict(t.split("=", 1) for t in args.tree)

    work = args.root / f"cli-latency-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # dbt's state for the build, and Prefect's home for a CLI that imports it: in the work folder.
    # --tiny keeps the caller's dbt cache where it has one (the tests': its warehouse, named as
    # theirs are, starts from the empty warehouse and plan kept there, yardstick/storage/
    # kept.py, not from a cold dbt build); the commands measured never read that cache.
    shared_dbt = args.tiny and bool(os.environ.get("YARDSTICK_DBT_STATE"))
    if not shared_dbt:
        os.environ["YARDSTICK_DBT_STATE"] = str(work / "dbt-state")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(work / "prefect-home")
    try:
        t0 = time.perf_counter()
        if args.warehouse:
            warehouse = args.warehouse.resolve()
        else:
            warehouse = build_warehouse(
                work, nights, "w.duckdb" if shared_dbt else "warehouse.duckdb"
            )
        build_s = time.perf_counter() - t0
        wanted = commands(work, warehouse, args.env_name if args.warehouse else ENV)
        samples: dict[tuple[str, str], list] = {}

        listed: dict[tuple[str, str], tuple[list[str], int]] = {}

        def variant(label: str, name: str):
            def once() -> float:
                if args.tiny:  # its one run also lists its imports: no second process
                    sample, listed[(label, name)] = measured_with_imports(
                        trees[label], wanted[name][0], work, env
                    )
                else:
                    sample = run_once(trees[label], wanted[name][0], work, env)
                samples.setdefault((label, name), []).append(sample)
                return sample[0]

            return once

        interleaved(
            {f"{label}/{name}": variant(label, name) for label in trees for name in wanted},
            rounds,
        )
        results = []
        for label in trees:
            for name, (argv, codes) in wanted.items():
                runs = samples[(label, name)]
                codes_seen = sorted({r[2] for r in runs})
                heavy, peak_bytes = listed.get((label, name)) or imports_and_peak(
                    trees[label], argv, work, env
                )
                results.append(
                    {
                        "tree": label,
                        "checkout": trees[label] or str(REPO),
                        "command": name,
                        "argv": argv,
                        "runs": len(runs),
                        "wall_s": statistics.median(r[0] for r in runs),
                        "cpu_s": statistics.median(r[1] for r in runs),
                        "peak_rss_bytes": peak_bytes,
                        "exit_codes": codes_seen,
                        "exit_ok": set(codes_seen) <= codes,
                        "stderr_lines": max(len(r[3].splitlines()) for r in runs),
                        "stderr": runs[-1][3][-500:],
                        "heavy_imports": heavy,
                        "within_1s": statistics.median(r[0] for r in runs) <= 1.0,
                    }
                )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"yardstick commands, median of {rounds} runs each; load {load_line()}")
    print(f"{'tree':8} {'command':10} {'wall s':>7} {'CPU s':>6} {'RSS MiB':>8} exit  imported")
    for r in results:
        print(
            f"{r['tree']:8} {r['command']:10} {r['wall_s']:7.2f} {r['cpu_s']:6.2f} "
            f"{r['peak_rss_bytes'] / 2**20:8.0f} {','.join(map(str, r['exit_codes'])):5} "
            f"{', '.join(r['heavy_imports']) or '-'}"
        )
    for r in results:
        harness.figure(f"{r['tree']}/{r['command']}/wall_s", r["wall_s"], "s", target=1.0)
        harness.figure(f"{r['tree']}/{r['command']}/cpu_s", r["cpu_s"], "CPU-s")
        harness.figure(f"{r['tree']}/{r['command']}/peak_rss_bytes", r["peak_rss_bytes"], "B")
    record = {
        "rounds": rounds,
        "nights": None if args.warehouse else nights,
        "warehouse_build_s": build_s,
        "trees": {label: root or str(REPO) for label, root in trees.items()},
        "target_wall_s": 1.0,
        "results": results,
    }
    harness.write(args.json, record)


if __name__ == "__main__":
    main()
