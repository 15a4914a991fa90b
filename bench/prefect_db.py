"""What one collection adds to Prefect's database: rows per table and bytes, old path (a task
run per environment and per family) against the new one (plain threads, no task run).

    .venv/bin/python bench/prefect_db.py [--envs 1 10] [--collections 5] [--paths old new]
        [--home DIR] [--keep]

Starts a real `prefect server` (SQLite under a project-local PREFECT_HOME, wiped first) and one
real redis-server per environment on free loopback ports, then runs the collect flow in this
process against that server: a warm-up collection per case (the flow row, the concurrency
limit), then --collections measured ones. After each case it waits until the database stops
changing (events and task run states are written by server services, logs in client batches)
and prints per-collection averages: rows by table, bytes in use (pages minus free pages),
growth of prefect.db + its WAL, and what that makes over 288 collections a day.
Figures only, no asserts. Runs are called in-process, not through a worker: a worker adds a
few rows per run (a Scheduled state, worker events), which bench/collect_wall.py shows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, free_port  # noqa: E402 - beside this file, not a package

PREFECT = Path(sys.executable).parent / "prefect"
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


def prefect_env(home: Path) -> dict[str, str]:
    """This process's environment without PREFECT_* settings, with a private PREFECT_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        # The server writes received events every second instead of every 5 s: the bench
        # waits for the database to settle, the rows written are the same.
        PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL="1",
    )
    return env


def start_server(home: Path, port: int, log_path: Path) -> subprocess.Popen:
    """`prefect server start` on 127.0.0.1:port; returns once /api/health answers."""
    log = log_path.open("w")
    server = subprocess.Popen(
        [str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        env=prefect_env(home),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=home,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"prefect server exited ({server.returncode}); see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2):
                return server
        except OSError:
            time.sleep(0.5)
    server.terminate()
    raise SystemExit(f"prefect server not healthy after 120 s; see {log_path}")


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
    flow_fn, path: str, n_envs: int, urls: list[str], k: int, work: Path, db: Path
) -> Case:
    """Warm up once, then run k collections of n_envs environments; deltas per collection."""
    config = write_environments(work / f"envs-{path}-{n_envs}.yaml", urls[:n_envs])
    lake_dir = work / f"lake-{path}-{n_envs}"
    case = Case(path, n_envs, k)
    flow_fn(config_path=str(config), lake_dir=str(lake_dir), return_state=True)
    before = settled(db)
    for _ in range(k):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        state = flow_fn(config_path=str(config), lake_dir=str(lake_dir), return_state=True)
        case.wall_s.append(time.perf_counter() - wall0)
        case.cpu_s.append(time.process_time() - cpu0)
        case.states.append(state.type.value)
    after = settled(db)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--collections", type=int, default=5)
    parser.add_argument("--paths", nargs="+", choices=["old", "new"], default=["old", "new"])
    parser.add_argument("--home", type=Path, default=REPO / ".yardstick" / "bench-prefect-db")
    parser.add_argument("--keep", action="store_true", help="keep PREFECT_HOME afterwards")
    args = parser.parse_args()

    home: Path = args.home
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    port = free_port()
    print(f"prefect server on 127.0.0.1:{port}, PREFECT_HOME={home}")
    server = start_server(home, port, home / "server.log")
    # This process is the flow runs' client: same home, the server above, INFO logs to the
    # API as a worker's flow run would send them, but only warnings on the console.
    for key in [k for k in os.environ if k.startswith("PREFECT_")]:
        del os.environ[key]
    os.environ.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL="WARNING",
    )
    from yardstick.host.embedded import RedisProcess

    sys.path.insert(0, str(REPO / "bench"))
    from collect_tasks import collect_with_tasks

    from yardstick.flows.collect import collect

    flows = {"old": collect_with_tasks, "new": collect}
    servers = [RedisProcess().start() for _ in range(max(args.envs))]
    work = Path(tempfile.mkdtemp(prefix="yardstick-prefect-db-"))
    cases: list[Case] = []
    try:
        for n_envs in args.envs:
            for path in args.paths:
                print(f"{path} path, {n_envs} environment(s): {args.collections} collections ...")
                cases.append(
                    run_case(
                        flows[path],
                        path,
                        n_envs,
                        [s.url for s in servers],
                        args.collections,
                        work,
                        home / "prefect.db",
                    )
                )
        report(cases)
    finally:
        for redis_server in servers:
            redis_server.stop()
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
