"""What one collection adds to Prefect's database: rows per table and bytes, old path (a task
run per environment and per family) against the new one (plain threads, no task run).

    .venv/bin/python bench/prefect_db.py [--envs 1 10] [--rounds 5] [--paths old new]
        [--home DIR] [--keep] [--json PATH] [--tiny]

Starts the app's own Prefect server (bench/_harness.prefect_server: SQLite under a
project-local PREFECT_HOME, wiped first; its services as `yardstick run` runs them) and one
real redis-server per environment on free loopback ports, then runs the collect flow in this
process against that server: a warm-up collection per case (the flow row, the concurrency
limit; none at --tiny, which also waits 2 s of quiet, not 4), then --rounds measured ones.
After each case it waits until the database stops changing (events and task run states are
written by server services, logs in client batches) and prints per-collection averages: rows by
table, bytes in use (pages minus free pages), growth of prefect.db + its WAL, and what that
makes over 288 collections a day.
Figures only, no asserts. Runs are called in-process, not through a worker: a worker adds a
few rows per run (a Scheduled state, worker events), which bench/collect_wall.py shows.
"""

from __future__ import annotations

import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Bench, prefect_server  # noqa: E402 - beside this file, not a package

RUNS_PER_DAY = 288  # the collect deployment's "*/5 * * * *"
# Tables shown one by one (the rest are summed under "other").
SHOWN = [
    "flow_run",
    "flow_run_state",
    "task_run",
    "task_run_state",
    "log",
    "events",
    "event_resources",
    "artifact",
    "artifact_collection",
]


@dataclass
class Snapshot:
    """Row counts by table and sizes of the SQLite database at one moment."""

    rows: dict[str, int]
    table_bytes: dict[str, int]  # table + its indexes, from dbstat
    used_bytes: int  # (page_count - freelist_count) * page_size
    file_bytes: int  # prefect.db + prefect.db-wal on disk


def snapshot(db: Path) -> Snapshot:
    """Read the database read-only (the server keeps writing; WAL lets both proceed)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        tables = {
            name: owner
            for name, owner in con.execute(
                "select name, tbl_name from sqlite_master where type in ('table', 'index')"
            )
        }
        rows = {
            name: con.execute(f'select count(*) from "{name}"').fetchone()[0]
            for name, owner in tables.items()
            if name == owner and not name.startswith("sqlite_")
        }
        table_bytes: dict[str, int] = {}
        for name, size in con.execute("select name, sum(pgsize) from dbstat group by name"):
            owner = tables.get(name, name)
            table_bytes[owner] = table_bytes.get(owner, 0) + size
        page_size = con.execute("pragma page_size").fetchone()[0]
        pages = con.execute("pragma page_count").fetchone()[0]
        free = con.execute("pragma freelist_count").fetchone()[0]
    finally:
        con.close()
    wal = db.with_name(db.name + "-wal")
    file_bytes = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return Snapshot(rows, table_bytes, (pages - free) * page_size, file_bytes)


def settled(db: Path, quiet_s: float = 4.0, timeout_s: float = 90.0) -> Snapshot:
    """The database once its row counts have not changed for quiet_s."""
    last = snapshot(db)
    still_since = time.monotonic()
    deadline = still_since + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = snapshot(db)
        if now.rows != last.rows:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= quiet_s:
            return now
    print(f"  (database still changing after {timeout_s:.0f} s; figures may be low)")
    return last


@dataclass
class Case:
    """One (path, environments) case: deltas per collection and timings."""

    path: str
    envs: int
    collections: int
    rows: dict[str, float] = field(default_factory=dict)
    table_bytes: dict[str, float] = field(default_factory=dict)
    used_bytes: float = 0.0
    file_bytes: float = 0.0
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    states: list[str] = field(default_factory=list)


def write_environments(path: Path, urls: list[str]) -> Path:
    """An environments file with one scratch environment per server URL."""
    import yaml

    envs = [{"name": f"env-{i:02d}", "url": url, "mode": "scratch"} for i, url in enumerate(urls)]
    path.write_text(yaml.safe_dump({"environments": envs}, sort_keys=False))
    return path


def run_case(
    flow_fn, path: str, n_envs: int, urls: list[str], k: int, work: Path, db: Path,
    warm_up: bool = True, quiet_s: float = 4.0,
) -> Case:  # fmt: skip
    """Warm up once (unless not `warm_up`: the deltas then include the first collection's
    flow row and concurrency limit), then run k collections of n_envs environments; deltas
    per collection, the database settled for `quiet_s` before and after."""
    config = write_environments(work / f"envs-{path}-{n_envs}.yaml", urls[:n_envs])
    lake_dir = work / f"lake-{path}-{n_envs}"
    case = Case(path, n_envs, k)
    if warm_up:
        flow_fn(config_path=str(config), lake_dir=str(lake_dir), return_state=True)
    before = settled(db, quiet_s)
    for _ in range(k):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        state = flow_fn(config_path=str(config), lake_dir=str(lake_dir), return_state=True)
        case.wall_s.append(time.perf_counter() - wall0)
        case.cpu_s.append(time.process_time() - cpu0)
        case.states.append(state.type.value)
    after = settled(db, quiet_s)
    case.rows = {t: (after.rows.get(t, 0) - before.rows.get(t, 0)) / k for t in after.rows}
    case.table_bytes = {
        t: (after.table_bytes.get(t, 0) - before.table_bytes.get(t, 0)) / k
        for t in after.table_bytes
    }
    case.used_bytes = (after.used_bytes - before.used_bytes) / k
    case.file_bytes = (after.file_bytes - before.file_bytes) / k
    return case


def report(cases: list[Case]) -> None:
    """Per-collection rows and bytes, side by side for every case."""
    heads = [f"{c.path} N={c.envs}" for c in cases]
    width = max(14, *(len(h) + 2 for h in heads))
    print("\nper collection (average over the measured collections):")
    print(f"{'':<22}" + "".join(f"{h:>{width}}" for h in heads))

    def line(label: str, values: list[float], fmt: str = "{:.1f}") -> None:
        print(f"{label:<22}" + "".join(f"{fmt.format(v):>{width}}" for v in values))

    for table in SHOWN:
        line(f"rows {table}", [c.rows.get(table, 0.0) for c in cases])
    other = [sum(v for t, v in c.rows.items() if t not in SHOWN) for c in cases]
    line("rows other tables", other)
    line("rows total", [sum(c.rows.values()) for c in cases])
    line("KiB in use", [c.used_bytes / 1024 for c in cases])
    line("KiB file growth", [c.file_bytes / 1024 for c in cases])
    for table in ("events", "event_resources", "log", "task_run", "task_run_state"):
        line(f"KiB {table}", [c.table_bytes.get(table, 0.0) / 1024 for c in cases])
    line("wall s (in-process)", [sum(c.wall_s) / len(c.wall_s) for c in cases], "{:.2f}")
    line("CPU s (this process)", [sum(c.cpu_s) / len(c.cpu_s) for c in cases], "{:.2f}")
    print(f"\nper day at {RUNS_PER_DAY} collections:")
    line("rows total", [sum(c.rows.values()) * RUNS_PER_DAY for c in cases], "{:,.0f}")
    line("MiB in use", [c.used_bytes * RUNS_PER_DAY / 2**20 for c in cases], "{:.1f}")
    line("task runs", [c.rows.get("task_run", 0) * RUNS_PER_DAY for c in cases], "{:,.0f}")
    line("log rows", [c.rows.get("log", 0) * RUNS_PER_DAY for c in cases], "{:,.0f}")
    line("events", [c.rows.get("events", 0) * RUNS_PER_DAY for c in cases], "{:,.0f}")
    for c in cases:
        if set(c.states) != {"COMPLETED"}:
            print(f"  note: {c.path} N={c.envs} ended in {sorted(set(c.states))}")


def main() -> None:
    """Parse arguments, start the server and redis-servers, run every case, print."""
    harness = Bench(
        "prefect_db", __doc__, rounds=5, tiny="1 environment, 1 collection a path, no warm-up"
    )
    harness.add_argument("--envs", type=int, nargs="+", default=[1, 10])
    harness.add_argument("--paths", nargs="+", choices=["old", "new"], default=["old", "new"])
    harness.add_argument("--home", type=Path, default=REPO / ".yardstick" / "bench-prefect-db")
    harness.add_argument("--keep", action="store_true", help="keep PREFECT_HOME afterwards")
    args = harness.parse()
    if args.tiny:
        args.envs, args.rounds = [1], 1

    home: Path = args.home
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    # This process is the flow runs' client: same home, the server, INFO logs to the API as a
    # worker's flow run would send them, but only warnings on the console.
    stack = ExitStack()
    quiet = {"PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING"}
    server = stack.enter_context(prefect_server(home, use_here=True, settings=quiet))
    print(f"prefect server at {server.api_url}, PREFECT_HOME={home}")
    from _collect_tasks import collect_with_tasks

    from yardstick.flows.collect import collect
    from yardstick.host.embedded import RedisProcess

    flows = {"old": collect_with_tasks, "new": collect}
    servers = [RedisProcess().start() for _ in range(max(args.envs))]
    work = Path(tempfile.mkdtemp(prefix="yardstick-prefect-db-"))
    cases: list[Case] = []
    try:
        for n_envs in args.envs:
            for path in args.paths:
                print(f"{path} path, {n_envs} environment(s): {args.rounds} collections ...")
                cases.append(
                    run_case(
                        flows[path],
                        path,
                        n_envs,
                        [s.url for s in servers],
                        args.rounds,
                        work,
                        home / "prefect.db",
                        # --tiny: no warm-up, 2 s of quiet (events flush every second here)
                        warm_up=not args.tiny,
                        quiet_s=2.0 if args.tiny else 4.0,
                    )
                )
        report(cases)
    finally:
        for redis_server in servers:
            redis_server.stop()
        stack.close()
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    for c in cases:
        case = f"{c.path}/{c.envs}"
        harness.figure(f"{case}/rows", sum(c.rows.values()), "rows per collection")
        harness.figure(f"{case}/used_bytes", c.used_bytes, "B per collection")
        harness.figure(f"{case}/file_bytes", c.file_bytes, "B per collection")
        harness.figure(f"{case}/wall_s", statistics.median(c.wall_s), "s")
    harness.write(args.json, {"cases": [asdict(c) for c in cases]})


if __name__ == "__main__":
    main()
