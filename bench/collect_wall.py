"""One collection of one environment under a real worker: where its wall time goes.

    .venv/bin/python bench/collect_wall.py [--rounds 5] [--paths new old] [--home DIR] [--keep]
        [--json PATH] [--tiny]

Starts the app's own Prefect server (bench/_harness.prefect_server: SQLite under a
project-local PREFECT_HOME, wiped first), a
`process` work pool and worker, one redis-server on a free loopback port and an
environments.yaml beside it; deploys the collect flow with `prefect deploy` (the repository's
prefect.yaml pull step, PWD set to the repository) and runs it with `run_deployment`. The
old path (bench/_collect_tasks.py: task runs per environment and family) is deployed beside
it. For each run it prints, from the flow run's state history:

- queue: Scheduled -> Pending (the worker's poll; 1 s here, PREFECT_WORKER_QUERY_SECONDS),
- start: Pending -> Running (process start, imports, pull step, loading the flow),
- body: Running -> final state (Prefect's start_time -> end_time: the flow run time),
- total: run_deployment call -> it returns (0.2 s polling),

and the flow-run process itself as /usr/bin/time saw it (wall, CPU, max RSS), the cold import
time of the flow module alone, and the database rows each run added. Figures only.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, prefect_server, stop_tree  # noqa: E402 - beside this file, not a package
from prefect_db import SHOWN, settled  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PREFECT = Path(sys.executable).parent / "prefect"
POOL = "yardstick-bench"
ENTRYPOINTS = {
    "new": ("yardstick/flows/collect.py:collect", "yardstick.flows.collect"),
    "old": ("bench/_collect_tasks.py:collect_with_tasks", "_collect_tasks"),
}
TIME_MARK = "YARDSTICK_TIME"
TIME_LINE = re.compile(
    TIME_MARK + r" wall_s=([\d.]+) user_s=([\d.]+) sys_s=([\d.]+) maxrss_kb=(\d+)"
)


@dataclass
class Run:
    """One flow run's timings (seconds) and its process figures."""

    state: str
    queue_s: float
    start_s: float
    body_s: float
    total_s: float
    process_wall_s: float = float("nan")
    cpu_s: float = float("nan")
    maxrss_mib: float = float("nan")


def cli(env: dict[str, str], *args: str) -> str:
    """Run the prefect CLI from the repository; fail loudly."""
    done = subprocess.run(
        [str(PREFECT), "--no-prompt", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode:
        raise SystemExit(f"prefect {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def cold_import_s(module: str, env: dict[str, str], repeat: int = 3) -> float:
    """Median wall of a fresh interpreter importing the engine and `module` (bytecode warm)."""
    code = f"import prefect.engine, {module}"
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env={**env, "PYTHONPATH": str(REPO / "bench")},
            check=True,
            capture_output=True,
        )
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def time_lines(log: Path) -> list[re.Match]:
    """/usr/bin/time's lines in the worker's output (it streams the flow runs' stderr)."""
    return [m for m in map(TIME_LINE.search, log.read_text(errors="replace").splitlines()) if m]


def one_run(deployment: str, params: dict, job_vars: dict, worker_log: Path) -> Run:
    """Run the deployment once and read its state history."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    seen = len(time_lines(worker_log))
    start = time.perf_counter()
    flow_run = run_deployment(
        deployment, parameters=params, job_variables=job_vars, timeout=300, poll_interval=0.2
    )
    total_s = time.perf_counter() - start
    with get_client(sync_client=True) as client:
        states = sorted(client.read_flow_run_states(flow_run.id), key=lambda s: s.timestamp)
    at = {}
    for state in states:
        at.setdefault(state.type.value, state.timestamp)
    final = states[-1]
    run = Run(
        state=final.type.value,
        queue_s=(at["PENDING"] - at["SCHEDULED"]).total_seconds(),
        start_s=(at["RUNNING"] - at["PENDING"]).total_seconds(),
        body_s=(flow_run.end_time - flow_run.start_time).total_seconds(),
        total_s=total_s,
    )
    deadline = time.monotonic() + 10  # the process exits after its final state is set
    while time.monotonic() < deadline:
        lines = time_lines(worker_log)
        if len(lines) > seen:
            wall, user, system, rss_kb = lines[-1].groups()
            run.process_wall_s = float(wall)
            run.cpu_s = float(user) + float(system)
            run.maxrss_mib = int(rss_kb) / 1024
            break
        time.sleep(0.1)
    return run


def main() -> None:
    """Start everything, deploy both paths, run each several times, print."""
    harness = Bench(
        "collect_wall", __doc__, rounds=5, tiny="1 run of the new path, no warm-up, 1 cold import"
    )
    harness.add_argument("--paths", nargs="+", choices=["new", "old"], default=["new", "old"])
    harness.add_argument("--home", type=Path, default=REPO / ".yardstick" / "bench-collect-wall")
    harness.add_argument("--keep", action="store_true", help="keep PREFECT_HOME afterwards")
    args = harness.parse()
    if args.tiny:
        args.rounds, args.paths = 1, ["new"]

    home: Path = args.home
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    stack = ExitStack()
    server = stack.enter_context(prefect_server(home, use_here=True))
    print(f"prefect server at {server.api_url}, PREFECT_HOME={home}")
    env = {**os.environ, "PWD": str(REPO), "PREFECT_WORKER_QUERY_SECONDS": "1"}
    from yardstick.host.embedded import RedisProcess

    redis_server = RedisProcess().start()
    work = Path(tempfile.mkdtemp(prefix="yardstick-collect-wall-"))
    worker = None
    try:
        config = work / "environments.yaml"
        config.write_text(
            f"environments:\n  - name: bench\n    url: {redis_server.url}\n    mode: scratch\n"
        )
        cli(env, "work-pool", "create", POOL, "--type", "process", "--overwrite")
        for path in args.paths:
            cli(env, "deploy", ENTRYPOINTS[path][0], "--name", f"bench-{path}", "--pool", POOL)
        worker_log = home / "worker.log"
        worker = subprocess.Popen(
            [str(PREFECT), "worker", "start", "--pool", POOL, "--type", "process"],
            env=env,
            cwd=work,
            stdout=worker_log.open("w"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its group is stopped whole, also when it hangs
        )
        # The flow-run process under /usr/bin/time: its wall, CPU and peak RSS.
        timed = (
            f"/usr/bin/time -f '{TIME_MARK} wall_s=%e user_s=%U sys_s=%S maxrss_kb=%M' "
            f"{sys.executable} -m prefect.engine"
        )
        # The new path runs with the collect deployment's job variables from prefect.yaml
        # (its log level), the old one with none, as deployed before.
        import yaml

        deployed = {
            d["name"]: d for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
        }
        collect_vars = deployed["collect"]["work_pool"].get("job_variables") or {}
        job_vars = {"new": {**collect_vars, "command": timed}, "old": {"command": timed}}
        results: dict[str, list[Run]] = {}
        rows: dict[str, dict[str, float]] = {}
        imports: dict[str, float] = {}
        db = home / "prefect.db"
        for path in args.paths:
            params = {"config_path": str(config), "lake_dir": str(work / f"lake-{path}")}
            deployment = f"yardstick-collect/bench-{path}"
            if args.tiny:  # no warm-up: the one run's rows include the flow row's, the limit's
                print(f"{path}: {args.rounds} run of {deployment} (no warm-up) ...")
            else:
                print(f"{path}: warm-up run, then {args.rounds} runs of {deployment} ...")
                one_run(deployment, params, job_vars[path], worker_log)  # first: flow row, limit
            before = settled(home / "prefect.db")
            results[path] = [
                one_run(deployment, params, job_vars[path], worker_log) for _ in range(args.rounds)
            ]
            after = settled(db)
            rows[path] = {
                t: (after.rows.get(t, 0) - before.rows.get(t, 0)) / args.rounds for t in after.rows
            }
            rows[path]["KiB in use"] = (after.used_bytes - before.used_bytes) / args.rounds / 1024
            for table in ("events", "event_resources", "log", "flow_run_state", "task_run_state"):
                grown = after.table_bytes.get(table, 0) - before.table_bytes.get(table, 0)
                rows[path][f"KiB {table}"] = grown / args.rounds / 1024
            # --tiny: one fresh interpreter, not the median of 3
            imports[path] = cold_import_s(ENTRYPOINTS[path][1], env, 1 if args.tiny else 3)
        report(results, rows, imports)
        for path, runs in results.items():
            for attr in ("body_s", "start_s", "total_s", "process_wall_s", "cpu_s"):
                value = statistics.median(getattr(r, attr) for r in runs)
                harness.figure(f"{path}/{attr}", value, "CPU-s" if attr == "cpu_s" else "s")
            added = sum(v for t, v in rows[path].items() if not t.startswith("KiB"))
            harness.figure(f"{path}/rows", added, "rows per run")
            harness.figure(f"{path}/cold_import_s", imports[path], "s")
        harness.write(
            args.json,
            {"runs": {p: [asdict(r) for r in rs] for p, rs in results.items()}, "rows": rows},
        )
    finally:
        # SIGTERM, then SIGKILL after 30 s: a worker that hangs on its way out (seen under
        # load) must not outlive the bench and eat the CPU of whatever runs next.
        stop_tree(worker, grace_s=30.0)
        redis_server.stop()
        stack.close()
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


def report(
    results: dict[str, list[Run]], rows: dict[str, dict[str, float]], imports: dict[str, float]
) -> None:
    """Each run's figures, then medians, rows per run and import times."""
    print(
        f"\n{'path':<5}{'state':>11}{'queue s':>9}{'start s':>9}{'body s':>8}{'total s':>9}"
        f"{'proc wall s':>13}{'CPU s':>7}{'RSS MiB':>9}"
    )
    for path, runs in results.items():
        for r in runs:
            print(
                f"{path:<5}{r.state:>11}{r.queue_s:>9.2f}{r.start_s:>9.2f}{r.body_s:>8.2f}"
                f"{r.total_s:>9.2f}{r.process_wall_s:>13.2f}{r.cpu_s:>7.2f}{r.maxrss_mib:>9.0f}"
            )
    print("\nmedians:")
    for path, runs in results.items():

        def med(attr: str, runs: list[Run] = runs) -> float:
            return statistics.median(getattr(r, attr) for r in runs)

        print(
            f"  {path}: flow run time (start->end) {med('body_s'):.2f} s, process start to "
            f"Running {med('start_s'):.2f} s, run_deployment total {med('total_s'):.2f} s, "
            f"process wall {med('process_wall_s'):.2f} s, CPU {med('cpu_s'):.2f} s, "
            f"max RSS {med('maxrss_mib'):.0f} MiB; cold import of prefect.engine + the flow "
            f"module {imports[path]:.2f} s"
        )
    print("\nPrefect database rows per run under the worker:")
    for path, per_table in rows.items():
        shown = ", ".join(f"{t} {per_table.get(t, 0):.0f}" for t in SHOWN if per_table.get(t))
        total = sum(v for t, v in per_table.items() if not t.startswith("KiB"))
        kib = ", ".join(
            f"{t[4:]} {v:.0f}"
            for t, v in per_table.items()
            if t.startswith("KiB ") and t != "KiB in use"
        )
        print(f"  {path}: {shown}; total {total:.0f} rows")
        print(f"  {path}: {per_table['KiB in use']:.0f} KiB in use per run ({kib})")


if __name__ == "__main__":
    main()
