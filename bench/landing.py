"""Landing one collection: the Delta lake (one commit per table for every environment of the
collection, as flows/collect.py lands it) vs the tool's earlier format (one Parquet file per
table and environment: locally a temporary file then link(); on S3 a HEAD and one conditional
PUT per file), on local disk and on moto's S3 server on loopback, in one run.

    .venv/bin/python bench/landing.py [--envs 8] [--rounds 7] [--history 50] [--json PATH]

Each round lands a new collection (its own run id) of every environment into each lake, the
variants' order rotated round by round (bench/_harness.interleaved); the figure is the median
seconds of one collection. The tables are one collection's as the real shape gives them
(tests/lakes/schedule.py from bench/real_shape.json: SLOWLOG, latency monitor, counters, steps,
runs). Before the rounds, each Delta lake holds `--history` collections already, so the log
replay each commit starts with is that of a lake in use (checkpoints every 50 commits), not of
an empty one. What is measured is the client's cost plus moto's, not a network's: a real
endpoint adds its round trip to each request (the earlier format: 2 per file; Delta: a few
per table)."""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402 - beside this file, not a package
from lakes import schedule as sched  # noqa: E402

from yardstick.storage import delta, lakefs  # noqa: E402
from yardstick.storage.lakefs import Lake  # noqa: E402


def collection_tables(envs: int, per_day: int = 12) -> list[tuple[str, dict[str, pa.Table]]]:
    """(env, table -> rows) of one collection of every environment, from the real shape."""
    day = sched.TONIGHT - timedelta(days=1)
    run_id = sched.collection_run_id(day, 1, per_day)
    out = []
    for index in range(envs):
        merged, _ = sched.day_tables(index, [day], per_day, 100, sched.SLOWLOG_MAX_LEN)
        tables = {}
        for table, data in merged.items():
            rows = data.filter(pa.compute.equal(data["run_id"], run_id))
            if rows.num_rows:
                tables[table] = rows.drop_columns(["run_id", "schema_version"])
        out.append((sched.env_name(index), tables))
    return out


def legacy_write(lake_dir: str, table: str, env: str, run_id: str, data: pa.Table) -> None:
    """One file as the earlier format landed it (yardstick/storage/lake.py before Delta)."""
    rows = delta.prepare(table, env, run_id, data).drop_columns(["env", "period"])
    meta = {"yardstick.schema_version": "1", "yardstick.table": table}
    rows = rows.replace_schema_metadata(meta)
    name = f"{table}/env={env}/period={delta.run_period(run_id)}/{run_id}.parquet"
    if not lakefs.is_remote(lake_dir):
        final = Path(lake_dir) / name
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        pq.write_table(rows, tmp, compression="zstd")
        os.link(tmp, final)  # never overwriting
        tmp.unlink()
        return
    final = Lake.at(lake_dir).path(name)
    if lakefs.exists(final):  # the HEAD before the upload
        raise FileExistsError(str(final))
    fd, tmp = tempfile.mkstemp(suffix=".parquet")
    os.close(fd)
    try:
        pq.write_table(rows, tmp, compression="zstd")
        lakefs.filesystem().put_file(tmp, str(final), mode="create")  # If-None-Match: *
    finally:
        os.unlink(tmp)


def land_legacy(lake_dir: str, collection, run_id: str) -> float:
    """Seconds to land one collection in the earlier format (runs files last)."""
    start = time.perf_counter()
    for env, tables in collection:
        for table in sorted(tables, key=lambda t: (t == "runs", t == "steps", t)):
            legacy_write(lake_dir, table, env, run_id, tables[table])
    return time.perf_counter() - start


def land_delta(lake_dir: str, collection, run_id: str) -> float:
    """Seconds to land one collection in the Delta lake (one commit per table)."""
    start = time.perf_counter()
    with delta.batch(Lake.at(lake_dir), f"collection {run_id}"):
        for env, tables in collection:
            for table, rows in tables.items():
                delta.write(Lake.at(lake_dir), table, env, run_id, rows)
    return time.perf_counter() - start


def main() -> None:
    harness = _harness.Bench("landing", __doc__, rounds=7, tiny="2 environments, 1 round")
    harness.add_argument("--envs", type=int, default=8, help="environments in the collection")
    harness.add_argument("--history", type=int, default=50, help="collections landed before")
    harness.add_argument("--no-s3", action="store_true", help="local disk only")
    harness.add_argument("--root", default=tempfile.gettempdir())
    args = harness.parse()
    if args.tiny:
        args.envs, args.rounds, args.history = 2, 1, 1
    from lake_s3 import start_moto

    work = Path(tempfile.mkdtemp(prefix="landing-bench-", dir=args.root))
    server = None
    try:
        targets = {"local disk": str(work / "local")}
        if not args.no_s3:
            server, _ = start_moto(work / "moto.log")
            targets["S3 (moto, loopback)"] = "s3://bench/landing"
        collection = collection_tables(args.envs)
        tables = sorted({t for _, ts in collection for t in ts})
        counter = iter(range(1_000_000))

        def next_run() -> str:
            """A new collection run id (5 minutes after the one before)."""
            n = next(counter)
            at = sched.day_start(sched.TONIGHT) + timedelta(minutes=5 * n)
            return f"{at:%Y%m%dT%H%M%S}Z-c{n % 1000:03d}"

        for where in targets.values():
            for _ in range(args.history):
                land_delta(f"{where}/delta", collection, next_run())
        variants = {}
        for label, where in targets.items():
            variants[f"{label}: Delta"] = lambda w=where: land_delta(
                f"{w}/delta", collection, next_run()
            )
            variants[f"{label}: earlier format"] = lambda w=where: land_legacy(
                f"{w}/legacy", collection, next_run()
            )
        seconds = _harness.interleaved(variants, args.rounds)
        medians = {name: statistics.median(values) for name, values in seconds.items()}
        print(
            f"\none collection of {args.envs} environments ({len(tables)} tables: "
            f"{', '.join(tables)}), {args.rounds} rounds interleaved, Delta lakes holding "
            f"{args.history} collections before; load {_harness.load_line()}:\n"
        )
        print("| lake | Delta: s per collection | earlier format: s | Delta / earlier |")
        print("| --- | ---: | ---: | ---: |")
        rows = {}
        for label in targets:
            delta, legacy = medians[f"{label}: Delta"], medians[f"{label}: earlier format"]
            rows[label] = {
                "delta_s": delta,
                "legacy_s": legacy,
                "ratio": delta / legacy,
                "delta_commits": len(tables),
                "legacy_files": sum(len(ts) for _, ts in collection),
            }
            print(f"| {label} | {delta:.3f} | {legacy:.3f} | {delta / legacy:.2f} |")
            where = label.split()[0].lower()
            harness.figure(f"{where}/delta_s", delta, "s")
            harness.figure(f"{where}/legacy_s", legacy, "s")
            harness.figure(f"{where}/delta_over_legacy", delta / legacy, "ratio")
        harness.write(
            args.json,
            {
                "envs": args.envs,
                "rounds": args.rounds,
                "history": args.history,
                "tables": tables,
                "seconds": seconds,
                "lakes": rows,
            },
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
