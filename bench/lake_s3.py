"""Landing on a local S3 API server vs local disk: seconds per run and per file, then the lake's
compaction and a full warehouse build from each (issue 11, "one lake on object storage").

    .venv/bin/python bench/lake_s3.py [--runs 25] [--keys 2000] [--envs 1] [--root /tmp]

The same tables land in both lakes through delta.write, run by run as the flows land them: per
environment one nightly run (fingerprint, round trip, key space, SLOWLOG, latency monitor,
counters: ~15 tables, the key-space scan's per-key rows and the round trip's histograms among
them) and `--runs - 1` collections (SLOWLOG, latency monitor, counters: ~6 tables), the tables
measured once on a scratch Redis holding `--keys` keys and re-landed under new run ids. Each
table of a run is one Delta commit (delta.write; a collection of several environments would be
one commit per table, bench/landing.py). The S3 server is moto's standalone server
(`python -m moto.server`) on loopback, started here: what is measured is the client's cost per
request (delta-rs: the log's listing and reads, the data file's PUT, the commit's conditional
PUT) plus moto's, not a network's; a real endpoint adds its round trip (~1-20 ms) to each
request. Credentials are fake and set for this process only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench, free_port  # noqa: E402 - beside this file, not a package

from yardstick.storage import compaction, delta, warehouse  # noqa: E402
from yardstick.storage.lakefs import Lake  # noqa: E402


def start_moto(log: Path) -> tuple[subprocess.Popen, str]:
    """moto's S3 server on a free loopback port, with fake credentials in os.environ."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"moto did not start: {log.read_text()[-1000:]}") from None
            time.sleep(0.05)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(key, None)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
        AWS_EC2_METADATA_DISABLED="true",
    )
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bench", method="PUT")).close()
    return server, endpoint


def templates(keys: int) -> tuple[dict[str, pa.Table], dict[str, pa.Table]]:
    """The tables of one nightly run and one collection, measured once on a scratch Redis
    (the families the nightly and collect flows run there, the quick profile)."""
    import redis

    from yardstick.host.embedded import RedisProcess
    from yardstick.settings.config import Environment
    from yardstick.settings.profiles import KeyspaceProfile, RoundTripProfile, get_profile
    from yardstick.storage.schemas import to_table
    from yardstick.tasks.counters import snapshot_counters
    from yardstick.tasks.fingerprint import fingerprint
    from yardstick.tasks.keyspace import keyspace
    from yardstick.tasks.latency_monitor import collect_latency
    from yardstick.tasks.round_trip import round_trip
    from yardstick.tasks.slowlog import collect_slowlog

    quick = get_profile("quick")
    with RedisProcess() as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("slowlog-log-slower-than", 0)
        pipe = client.pipeline(transaction=False)
        for i in range(keys):
            pipe.set(f"{('user', 'session', 'cache')[i % 3]}:{i}", "x" * (10 + i % 50))
        pipe.execute()
        client.config_set("slowlog-log-slower-than", 10_000)
        env = Environment(name="bench", url=server.url, mode="scratch")
        collected = {
            "slowlog": collect_slowlog(env, quick.slowlog),
            "latency_monitor": collect_latency(env),
            "counters": snapshot_counters(env),
        }
        nightly = {
            "fingerprint": fingerprint(env, None),
            "round_trip": round_trip(env, RoundTripProfile(windows=2, window_s=0.2)),
            "keyspace": keyspace(env, KeyspaceProfile(max_keys=keys, max_wall_s=30)),
            **collected,
        }
    now = datetime.now(UTC)
    out = []
    for families, profile in ((nightly, "quick"), (collected, "collect")):
        tables: dict[str, pa.Table] = {}
        for result in families.values():
            tables.update({t: d for t, d in result.tables.items() if d.num_rows})
        steps = [
            {
                "family": f,
                "status": "ok",
                "started_at": now,
                "finished_at": now,
                "duration_s": 0.1,
                "window_s": r.window_s,
            }
            for f, r in families.items()
        ]
        tables["steps"] = to_table("steps", steps)
        run = {
            "profile": profile,
            "started_at": now,
            "finished_at": now,
            "duration_s": 1.0,
            "status": "ok",
            "mode": "scratch",
            "transport": "direct",
            "url": "redis://bench",
            "host_group": "localhost",
            "prober_on_host": True,
            "tool_version": "bench",
        }
        tables["runs"] = to_table("runs", [run])  # last in the dict: landed last
        out.append(tables)
    return out[0], out[1]


def runs_of(envs: int, runs: int, keys: int) -> list[tuple[str, str, dict[str, pa.Table]]]:
    """(env, run id, tables): per environment one nightly run then collections 5 minutes
    apart, the same measured tables each time under a new run id."""
    nightly, collection = templates(keys)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    found = []
    for index in range(envs):
        for i in range(runs):
            run_id = delta.new_run_id(start + timedelta(minutes=5 * i, seconds=index))
            found.append((f"env{index}", run_id, nightly if i == 0 else collection))
    return found


def land(lake: Lake, runs) -> tuple[int, float, float]:
    """Land every run; (tables landed: one commit each, seconds, slowest run's seconds)."""
    files, slowest = 0, 0.0
    start = time.perf_counter()
    for env, run_id, tables in runs:
        t = time.perf_counter()
        for table, rows in tables.items():
            files += delta.write(lake, table, env, run_id, rows) is not None
        slowest = max(slowest, time.perf_counter() - t)
    return files, time.perf_counter() - start, slowest


def main() -> None:
    harness = Bench("lake_s3", __doc__, rounds=None, tiny="2 runs, 100 keys")
    harness.add_argument("--runs", type=int, default=25, help="runs per environment (>= 2)")
    harness.add_argument("--keys", type=int, default=2000, help="keys of the nightly scan")
    harness.add_argument("--envs", type=int, default=1)
    harness.add_argument("--root", default=tempfile.gettempdir())
    args = harness.parse()
    if args.tiny:
        args.runs, args.keys, args.envs = 2, 100, 1
    work = Path(tempfile.mkdtemp(prefix="lake-s3-bench-", dir=args.root))
    server, _ = start_moto(work / "moto.log")
    try:
        runs = runs_of(args.envs, max(2, args.runs), args.keys)
        targets = {
            "local disk": Lake.at(work / "lake"),
            "S3 (moto, loopback)": Lake.at("s3://bench/lake"),
        }
        if not args.tiny:  # dbt parses the project once per state folder: in neither figure
            land(Lake.at(work / "warm-up"), runs[:2])
            warehouse.update(
                Lake.at(str(work / "warm-up")), work / "warm-up" / "w.duckdb", full=True
            )
        rows = []
        for label, where in targets.items():
            files, wall, slowest = land(where, runs)
            t = time.perf_counter()
            report = compaction.compact(where)
            compact_s = time.perf_counter() - t
            t = time.perf_counter()
            result = warehouse.update(where, work / label.split()[0] / "w.duckdb", full=True)
            rows.append(
                (label, len(runs), files, wall, slowest, compact_s, report.files_in, result)
            )
        print(
            f"\n{args.envs} environment(s), {len(runs)} runs ({args.runs - 1} collections and "
            f"one nightly run per environment, {args.keys} keys), this machine:\n"
        )
        print(
            "| lake | runs | commits | landing s | s per run | ms per commit | slowest run s "
            "| compaction s (files in) | full build s (load s) |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for label, n, files, wall, slowest, compact_s, files_in, result in rows:
            print(
                f"| {label} | {n} | {files} | {wall:.2f} | {wall / n:.3f} | "
                f"{1000 * wall / files:.1f} | {slowest:.2f} | {compact_s:.2f} ({files_in}) | "
                f"{result.wall_s:.1f} ({result.load_s:.2f}) |"
            )
            where = label.split()[0].lower()
            harness.figure(f"{where}/landing_s_per_run", wall / n, "s")
            harness.figure(f"{where}/ms_per_commit", 1000 * wall / files, "ms")
            harness.figure(f"{where}/compaction_s", compact_s, "s")
            harness.figure(f"{where}/full_build_s", result.wall_s, "s")
        harness.write(
            args.json,
            {
                "envs": args.envs,
                "runs": len(runs),
                "keys": args.keys,
                "lakes": {
                    label: {"commits": files, "landing_s": wall, "slowest_run_s": slowest,
                            "compaction_s": compact_s, "files_in": files_in,
                            "build_s": result.wall_s, "load_s": result.load_s}
                    for label, _n, files, wall, slowest, compact_s, files_in, result in rows
                },
            },
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
