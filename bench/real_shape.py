"""The shape of real nights, taken from a real run: bench/retention.py generates its lakes from it.

    .venv/bin/python bench/real_shape.py [--profile nightly] [--collections 4]
        [--root /work/bench-tmp/real-shape] [--out bench/real_shape.json]

Starts two local redis-servers with the latency monitor on (threshold 1 ms) and the SLOWLOG at
5 ms, an application that logs slow commands on both, and runs the tool for real (Prefect flows
on the app's own Prefect server, bench/_harness.prefect_server): one nightly run of a scratch
environment and a read-only one, then a few collections of both. Then it reads the lake and
records, per run kind (scratch_nightly, read_only_nightly, scratch_collection,
read_only_collection):

- the families that ran (steps) and, for every table the tool declares (yardstick/storage/
  schemas.py: the run's own tables such as runs, steps, family_load, and every family's) and
  every table found in the lake, the rows that run landed (0 when none): bench/retention.py
  fails loudly, naming the table, when the tool declares a table this file does not know
  (run this script again, niced: it takes a few minutes, and commit the JSON);
- the rows themselves, at most MAX_ROWS per table (timestamps as seconds after the run's
  start): the bench replays them for the tables it has no model of, so their columns,
  values and row counts are real ones.

Collections after the first are the steady state (the first one reads what the queues held);
their row counts are medians over those collections.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import REPO, Bench, git_revision, prefect_server  # noqa: E402

from yardstick.storage.lakefs import Lake  # noqa: E402

SHAPE_PATH = Path(__file__).resolve().parent / "real_shape.json"
# Rows kept per table and run kind (the rest are counted only), but for the tables kept whole.
MAX_ROWS = 60
WHOLE_TABLES = {"fingerprint", "steps", "runs"}
# A Lua busy loop the application runs: ~10-30 ms on this machine, above both thresholds.
BUSY = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"
# Keys the application holds on the read-only server (its key space is scanned at night; the
# bench scales keyspace_keys to its own --keys).
APP_KEYS = 2_000
# Columns whose values say where the shape was taken, not what a run looks like.
PRIVATE = {"url", "prober_hostname", "flow_run_id", "hostname", "executable", "tool_path"}


def _jsonable(value: object, started: datetime) -> object:
    """A cell as JSON: timestamps as seconds after the run started, bytes as text."""
    if isinstance(value, datetime):
        return round((value - started).total_seconds(), 6)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list):
        return [_jsonable(v, started) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v, started) for k, v in value.items()}
    if isinstance(value, float) and value != value:  # NaN
        return None
    return value


def declared_tables() -> dict[str, str]:
    """Every table the tool may land, with its owner (a family's name, or `run` for the tables
    yardstick/storage/schemas.py declares itself: runs, steps, family_load, ...): what the
    shape must record for every run kind, 0 rows where that kind lands none."""
    from yardstick.storage.schemas import TABLES
    from yardstick.tasks.registry import families

    owners = {table: "run" for table in TABLES}
    for family in families().values():
        owners |= {table: family.name for table in family.tables}
    return owners


def start_servers(work: Path) -> list:
    """The scratch and the read-only server: latency monitor on, SLOWLOG at 5 ms."""
    from yardstick.host.embedded import RedisProcess

    args = ["--latency-monitor-threshold", "1", "--slowlog-log-slower-than", "5000"]
    return [RedisProcess(extra_args=args).start() for _ in range(2)]


def app_traffic(servers: list, rounds: int) -> None:
    """The application: slow commands (SLOWLOG entries, latency events) on both servers."""
    import redis

    for server in servers:
        client = redis.Redis(port=server.port, client_name="shop-app", protocol=2)
        for _ in range(rounds):
            client.eval(BUSY, 0, 400_000)
        client.close()


def fill_app_keys(server) -> None:
    """Application keys on the read-only server, for its key-space scan."""
    import redis

    client = redis.Redis(port=server.port, protocol=2)
    pipe = client.pipeline(transaction=False)
    for i in range(APP_KEYS):
        if i % 3 == 0:
            pipe.hset(f"user:{i}", mapping={"name": f"n{i}", "visits": i})
        elif i % 3 == 1:
            pipe.set(f"session:{i}", "x" * (i % 50 + 1))
        else:
            pipe.rpush(f"feed:{i}", *range(i % 20 + 1))
    pipe.execute()
    client.close()


def read_lake(lake_dir: Path) -> dict[tuple[str, str], dict[str, list[dict]]]:
    """Every landed row, by (env, run id) and table (the current files of every Delta table
    in the lake, declared or not: a table nobody declared still shows in the shape)."""
    import pyarrow.parquet as pq

    from yardstick.storage import delta

    tables = sorted(
        name for name in os.listdir(lake_dir) if (lake_dir / name / "_delta_log").is_dir()
    )
    out: dict[tuple[str, str], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for f in delta.current_files(Lake.at(lake_dir), tables):
        for row in pq.read_table(f.path).to_pylist():
            out[(f.env, row["run_id"])][f.table].append(row)
    return out


def summarise(
    runs: dict[tuple[str, str], dict[str, list[dict]]], modes: dict[str, str]
) -> dict[str, dict]:
    """Per run kind: families that ran, rows per declared table, example rows."""
    by_kind: dict[str, list[tuple[str, dict[str, list[dict]]]]] = defaultdict(list)
    for (env, run_id), tables in sorted(runs.items(), key=lambda item: item[0][1]):
        run_row = tables["runs"][0]
        kind = modes[env].replace("-", "_") + (
            "_collection" if run_row["profile"] == "collect" else "_nightly"
        )
        by_kind[kind].append((run_id, tables))
    kinds = {}
    for kind, found in sorted(by_kind.items()):
        # The first collection reads what the queues held before: not the steady state.
        steady = found[1:] if kind.endswith("_collection") and len(found) > 1 else found
        run_id, example = steady[-1]
        started = example["runs"][0]["started_at"]
        names = sorted(set(declared_tables()) | {t for _, tables in found for t in tables})
        rows = {
            table: int(statistics.median(len(tables.get(table, [])) for _, tables in steady))
            for table in names
        }
        kinds[kind] = {
            "runs_seen": len(found),
            "runs_used": len(steady),
            "families": sorted({s["family"] for s in example["steps"]}),
            "steps": [[s["family"], s["status"], s["reason"]] for s in example["steps"]],
            "rows": rows,
            "rows_each_run": {
                table: [len(tables.get(table, [])) for _, tables in steady] for table in names
            },
            "examples": {
                table: [
                    {
                        k: _jsonable(v, started)
                        for k, v in row.items()
                        if k not in ("run_id", "schema_version") and k not in PRIVATE
                    }
                    for row in example.get(table, [])[: None if table in WHOLE_TABLES else MAX_ROWS]
                ]
                for table in names
                if example.get(table)
            },
        }
    return kinds


def measure(args: argparse.Namespace) -> dict:
    """Run the tool for real and return the shape."""
    import yaml

    work = args.root
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    home = work / "prefect"
    home.mkdir()
    for key in [k for k in os.environ if k.startswith("PREFECT_")]:
        del os.environ[key]
    os.environ.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
    )
    # --tiny: the caller's dbt cache (the tests'), set again once the Prefect server is up
    # (prefect_server clears this process's environment), and the warehouse named as theirs
    # are: it starts from the empty warehouse and plan kept there (yardstick/storage/kept.py).
    callers_dbt_state = os.environ.get("YARDSTICK_DBT_STATE") if args.tiny else None
    if not callers_dbt_state:
        os.environ["YARDSTICK_DBT_STATE"] = str(work / "dbt-state")
    from yardstick.flows.collect import collect
    from yardstick.flows.nightly import nightly

    servers = start_servers(work)
    try:
        # Only on the read-only server: a scratch database holds only what the tool writes
        # (the memory family refuses one with foreign keys).
        fill_app_keys(servers[1])
        config = work / "environments.yaml"
        envs = [
            {"name": "scratch-real", "url": servers[0].url, "mode": "scratch"},
            {"name": "read-only-real", "url": servers[1].url, "mode": "read-only"},
        ]
        config.write_text(yaml.safe_dump({"environments": envs}, sort_keys=False))
        modes = {e["name"]: e["mode"] for e in envs}
        lake_dir = work / "lake"
        timings = {}
        quiet = {"PREFECT_LOGGING_LEVEL": "WARNING"}
        with prefect_server(home / "server", use_here=True, settings=quiet):
            if callers_dbt_state:
                os.environ["YARDSTICK_DBT_STATE"] = callers_dbt_state
            app_traffic(servers, 3)
            start = time.perf_counter()
            state = nightly(
                config_path=str(config),
                profile=args.profile,
                lake_dir=str(lake_dir),
                warehouse_path=str(
                    work / ("w.duckdb" if callers_dbt_state else "warehouse.duckdb")
                ),
                out_dir=str(work / "out"),
                return_state=True,
            )
            timings["nightly_s"] = round(time.perf_counter() - start, 1)
            print(f"nightly ({args.profile}): {state.type.value} in {timings['nightly_s']} s")
            for i in range(args.collections):
                # 0..2 new slow commands between collections, as a quiet application logs.
                app_traffic(servers, i % 3)
                start = time.perf_counter()
                state = collect(config_path=str(config), lake_dir=str(lake_dir), return_state=True)
                print(f"collection {i + 1}: {state.type.value} in "
                      f"{time.perf_counter() - start:.1f} s")  # fmt: skip
        version = servers[0].binary.version
    finally:
        for server in servers:
            server.stop()
    kinds = summarise(read_lake(lake_dir), modes)
    import pyarrow as pa

    return {
        "taken": {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "git_revision": git_revision(),
            "profile": args.profile,
            "collections": args.collections,
            "redis_server": ".".join(map(str, version))
            if isinstance(version, tuple)
            else str(version),
            "app_keys": APP_KEYS,
            "latency_monitor_threshold_ms": 1,
            "slowlog_log_slower_than_us": 5000,
            "pyarrow": pa.__version__,
            "timings": timings,
            "how": "bench/real_shape.py: " + " ".join(sys.argv[1:]),
        },
        "kinds": kinds,
        # Who declares each table (a family, or `run`: yardstick/storage/schemas.py itself).
        "owners": declared_tables(),
    }


def main() -> None:
    """Measure and write bench/real_shape.json (or --out)."""
    harness = Bench("real_shape", __doc__, rounds=None, tiny="the quick profile, 1 collection")
    harness.add_argument("--profile", default="nightly", help="the nightly run's profile")
    harness.add_argument("--collections", type=int, default=4)
    harness.add_argument("--root", type=Path, default=Path("/work/bench-tmp/real-shape"))
    harness.add_argument("--out", type=Path, help=f"default {SHAPE_PATH} (--tiny: <root>)")
    args = harness.parse()
    if args.tiny:
        # One collection: each collection kind is still seen (its first collection stands in
        # for the steady state there is none of).
        args.profile, args.collections = "quick", 1
    # A tiny run's shape is no shape to generate lakes from: it never replaces the real one.
    args.out = args.out or (args.root / "real_shape.json" if args.tiny else SHAPE_PATH)
    # SIGTERM as an exception: the servers started here are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shape = measure(args)
    args.out.write_text(json.dumps(shape, indent=1, sort_keys=True, default=str) + "\n")
    for kind, data in shape["kinds"].items():
        landed = {t: n for t, n in data["rows"].items() if n}
        print(f"{kind}: {len(landed)} tables, {sum(landed.values()):,} rows: {landed}")
    never = [
        table
        for table in shape["owners"]
        if not any(data["rows"].get(table) for data in shape["kinds"].values())
    ]
    print(f"declared, landed by no run kind here: {', '.join(never) or 'none'}")
    for kind, data in shape["kinds"].items():
        harness.figure(f"{kind}/rows", sum(data["rows"].values()), "rows")
    for name, seconds in shape["taken"]["timings"].items():
        harness.figure(name, seconds, "s")
    rows = {kind: data["rows"] for kind, data in shape["kinds"].items()}
    harness.write(args.json, {"shape": args.out, "rows": rows, "never_landed": never})
    print(f"wrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")


if __name__ == "__main__":
    main()
