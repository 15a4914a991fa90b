"""History at scale: a year (and two) of nightly runs plus collections every 5 minutes for 50
environments, in the lake's steady state after compaction; then the warehouse's full rebuild,
tonight landed for real (lake.write), compaction, the nightly incremental update, a trend query.

    .venv/bin/python bench/retention.py [--envs 50] [--days 365] [--collections-per-day 288]
        [--keys 200000] [--detail-days 30] [--workers 2] [--root /work/bench-tmp] [--no-double]

Small check: --envs 2 --days 20 --collections-per-day 24 --keys 2000 (about a minute).

The lake is assembled from a store of generated units (one environment's month as compaction
writes it: compacted-g<N>.parquet with footer runs/replaces; one night's detail files as
lake.write lands them) kept under <root>/retention-store-*, keyed by generator version,
collections per day, keys and SLOWLOG length; a unit is the same whatever the lake's length,
so the 730-day lake reuses the 365-day lake's months. Each measurement works on a fresh lake
of hard links, so compaction never touches the store. The SQL project is copied at start and
the updates run on that copy: edits to sql/ during a long run do not turn the incremental
update into a rebuild. Targets (issue: history at scale): lake <= 30,000 files; nightly
incremental update <= 10 s and <= 1 GiB peak RSS, changing <= 10 % when the history doubles;
full rebuild <= 60 s; trend query <= 100 ms; <= 1 file per collection after compaction.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _schedule as sched  # noqa: E402 - beside this file, not a package
from _common import copy_sql  # noqa: E402

from yardstick.storage import (
    compaction,
    lake,  # noqa: E402
)

TARGET_FILES = 30_000
TARGET_INCREMENTAL_S = 10.0
TARGET_DOUBLING = 0.10
TARGET_REBUILD_S = 60.0
TARGET_TREND_MS = 100.0
TARGET_FILES_PER_COLLECTION = 1.0
TARGET_RSS_BYTES = 1 << 30
TREND_SQL = (
    "select started_at, value from figure_trends where env = ? and figure = 'rtt_client_p99_us'"
    " and subject = '' order by started_at"
)
GiB = float(1 << 30)


@dataclass(frozen=True)
class Shape:
    """What a generated unit depends on besides its environment and days."""

    per_day: int
    keys: int
    max_len: int

    def store(self, root: Path) -> Path:
        """Where units of this shape are kept."""
        return root / (
            f"retention-store-g{sched.GENERATOR}-c{self.per_day}-k{self.keys}-l{self.max_len}"
            f"-t{sched.TONIGHT:%Y%m%d}"
        )


# -- generation -----------------------------------------------------------------------------


def history_days(days: int) -> list[date]:
    """The days a lake of `days` days holds: the `days` before tonight."""
    return [sched.TONIGHT - timedelta(days=days - i) for i in range(days)]


def unit_name(period: str, days: list[date]) -> str:
    """A month unit's folder name: its period and first and last day."""
    return f"{period}_{days[0]:%d}-{days[-1]:%d}"


def split_runs(data: pa.Table) -> list[tuple[str, pa.Table]]:
    """A table sorted by run_id as (run id, its rows without run_id and schema_version)."""
    ids = data["run_id"].to_numpy(zero_copy_only=False)
    if not len(ids):
        return []
    cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    starts = [0, *cuts.tolist()]
    ends = [*cuts.tolist(), len(ids)]
    body = data.drop_columns(["run_id", "schema_version"])
    return [(str(ids[a]), body.slice(a, b - a)) for a, b in zip(starts, ends, strict=True)]


def write_compacted(
    root: Path, table: str, env: str, period: str, data: pa.Table, generation: int, since: date
) -> Path:
    """One partition's compacted file as yardstick.storage.compaction writes it: sorted by run id,
    footer runs and replaces (the generation before, and the files of the runs landed from
    day `since` on; a nightly compaction: since = the last day)."""
    data = data.sort_by([("run_id", "ascending")])
    runs = sorted(set(data["run_id"].to_pylist()))
    prefix = f"env={env}/period={period}/"
    replaces = [prefix + f"{run}.parquet" for run in runs if lake.run_day(run) >= since]
    if generation > 1:
        replaces.append(prefix + f"{lake.COMPACTED_PREFIX}{generation - 1:06d}.parquet")
    final = root / table / prefix / f"{lake.COMPACTED_PREFIX}{generation:06d}.parquet"
    stamped = lake.stamp(
        data,
        table,
        {"yardstick.runs": json.dumps(runs), "yardstick.replaces": json.dumps(sorted(replaces))},
    )
    return lake.write_atomic(stamped, final, f"{final} already exists")


def build_unit(store: str, index: int, period: str, days: list[date], shape: Shape) -> float:
    """Generate one environment's month (compacted files) into the store; seconds taken."""
    start = time.perf_counter()
    env = sched.env_name(index)
    final = Path(store) / "units" / f"env={env}" / unit_name(period, days)
    if final.is_dir():
        return 0.0
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(2)}")
    merged, _ = sched.day_tables(index, days, shape.per_day, shape.keys, shape.max_len)
    for table, data in merged.items():
        write_compacted(tmp, table, env, period, data, len(days), days[-1])
    _publish(tmp, final)
    return time.perf_counter() - start


def _publish(tmp: Path, final: Path) -> None:
    """Rename a generated unit into place; another bench that made it first wins."""
    try:
        tmp.rename(final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def build_detail(store: str, index: int, day: date, shape: Shape) -> float:
    """Land one night's detail files (keyspace_keys, ping_histogram) into the store."""
    start = time.perf_counter()
    env = sched.env_name(index)
    final = Path(store) / "units" / f"env={env}" / f"detail_{day:%Y-%m-%d}"
    if final.is_dir():
        return 0.0
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(2)}")
    _, detail = sched.nightly_tables(
        index, [day], shape.per_day, shape.keys, shape.max_len, frozenset([day])
    )
    for run_id, tables in detail.items():
        for table, data in tables.items():
            lake.write(tmp, table, env, run_id, data)
    tmp.mkdir(parents=True, exist_ok=True)
    _publish(tmp, final)
    return time.perf_counter() - start


def lake_units(days: int, envs: int, detail_days: int) -> list[tuple[str, int, str, list[date]]]:
    """(kind, env index, period, days) of every unit a lake of `days` x `envs` is made of."""
    by_period: dict[str, list[date]] = {}
    for day in history_days(days):
        by_period.setdefault(f"{day:%Y-%m}", []).append(day)
    # Retention ran last night (today = tonight - 1): detail of detail_days + 1 nights is kept.
    detail_from = sched.TONIGHT - timedelta(days=detail_days + 1)
    detail = [d for d in history_days(days) if d >= detail_from]
    units = []
    for index in range(envs):
        units += [("month", index, period, ds) for period, ds in by_period.items()]
        units += [("detail", index, "", [d]) for d in detail]
    return units


def ensure_units(store: Path, units: list, shape: Shape, workers: int) -> tuple[int, float]:
    """Generate the units missing from the store (a process pool); (generated, seconds)."""
    start = time.perf_counter()
    todo = []
    for kind, index, period, days in units:
        env_dir = store / "units" / f"env={sched.env_name(index)}"
        name = unit_name(period, days) if kind == "month" else f"detail_{days[0]:%Y-%m-%d}"
        if not (env_dir / name).is_dir():
            todo.append((kind, index, period, days))
    # Longest first: months before single nights.
    todo.sort(key=lambda u: -len(u[3]))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(build_unit, str(store), i, p, ds, shape)
            if kind == "month"
            else pool.submit(build_detail, str(store), i, ds[0], shape)
            for kind, i, p, ds in todo
        ]
        step = max(1, len(futures) // 10)
        for done, future in enumerate(futures, 1):
            future.result()
            if done % step == 0 or done == len(futures):
                print(
                    f"    generated {done}/{len(futures)} units "
                    f"({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
    return len(todo), time.perf_counter() - start


def assemble(store: Path, units: list, lake_dir: Path) -> int:
    """A fresh lake of hard links to the units; the number of files."""
    if lake_dir.exists():
        shutil.rmtree(lake_dir)
    lake_dir.mkdir(parents=True)
    files = 0
    for kind, index, period, days in units:
        env_dir = store / "units" / f"env={sched.env_name(index)}"
        unit = env_dir / (
            unit_name(period, days) if kind == "month" else f"detail_{days[0]:%Y-%m-%d}"
        )
        for folder, _dirs, names in os.walk(unit):
            for name in names:
                source = Path(folder) / name
                target = lake_dir / source.relative_to(unit)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(source, target)
                files += 1
    return files


def land_tonight(lake_dir: str, index: int, shape: Shape) -> tuple[int, float]:
    """Land tonight's collections and nightly run of one environment through lake.write,
    run by run as the flows do; (files landed, seconds)."""
    start = time.perf_counter()
    env = sched.env_name(index)
    tonight = sched.TONIGHT
    merged, detail = sched.day_tables(
        index, [tonight], shape.per_day, shape.keys, shape.max_len, frozenset([tonight])
    )
    files = 0
    for table, data in merged.items():
        for run_id, rows in split_runs(data):
            files += lake.write(lake_dir, table, env, run_id, rows) is not None
    for run_id, tables in detail.items():
        for table, rows in tables.items():
            files += lake.write(lake_dir, table, env, run_id, rows) is not None
    return files, time.perf_counter() - start


# -- self-check ----------------------------------------------------------------------------


def self_check(store: Path, shape: Shape, work: Path) -> str:
    """Land one environment's two days run by run, compact them with yardstick.storage.compaction,
    and compare every file with what the direct writer makes of the same days."""
    mark = store / ".self-check"
    if mark.exists():
        return mark.read_text().strip() + " (cached)"
    days = [sched.TONIGHT - timedelta(days=2), sched.TONIGHT - timedelta(days=1)]
    period = f"{days[0]:%Y-%m}"
    direct, landed = work / "check-direct", work / "check-landed"
    for folder in (direct, landed):
        shutil.rmtree(folder, ignore_errors=True)
    merged, _ = sched.day_tables(0, days, shape.per_day, shape.keys, shape.max_len)
    env = sched.env_name(0)
    for table, data in merged.items():
        write_compacted(direct, table, env, period, data, 1, days[0])
        for run_id, rows in split_runs(data):
            lake.write(landed, table, env, run_id, rows)
    compaction.compact(landed)
    problems, compared = [], 0
    for table in merged:
        ours = direct / table / f"env={env}" / f"period={period}"
        theirs = landed / table / f"env={env}" / f"period={period}"
        names_ours = sorted(os.listdir(ours))
        names_theirs = sorted(n for n in os.listdir(theirs) if n.endswith(".parquet"))
        if names_ours != names_theirs:
            problems.append(f"{table}: files {names_theirs} vs {names_ours}")
            continue
        a, b = pq.read_table(ours / names_ours[0]), pq.read_table(theirs / names_theirs[0])
        if not a.equals(b):
            problems.append(f"{table}: rows differ")
        if lake.read_footer(ours / names_ours[0]) != lake.read_footer(theirs / names_theirs[0]):
            problems.append(f"{table}: footer differs")
        compared += 1
    shutil.rmtree(direct, ignore_errors=True)
    shutil.rmtree(landed, ignore_errors=True)
    if problems:
        return "self-check FAILED: " + "; ".join(problems)
    text = (
        f"self-check: {compared} tables of one environment's two days landed run by run and "
        "compacted by yardstick.storage.compaction equal the direct writer's files (rows, footers)"
    )
    mark.write_text(text + "\n")
    return text


# -- measurement -----------------------------------------------------------------------------


def lake_stats(lake_dir: Path) -> tuple[int, int, Counter]:
    """Current Parquet files, bytes, and files per table."""
    files, size, per_table = 0, 0, Counter()
    for f in lake.current_files(lake_dir):
        files += 1
        size += f.path.stat().st_size
        per_table[f.table] += 1
    return files, size, per_table


def child_update(lake_dir: str, wh: str, full: bool, sql: str, out: str) -> None:
    """Run warehouse.update in this (child) process on the SQL copy; write the result."""
    # dbt's state (parse cache, lock) beside the SQL copy: never shared with other processes.
    os.environ["YARDSTICK_DBT_STATE"] = str(Path(sql).parent / "dbt-state")
    from yardstick.storage import dbt, warehouse

    dbt.project_dir = lambda: Path(sql)  # the copy taken at the bench's start
    result = warehouse.update(lake_dir, wh, full=full)
    data = asdict(result)
    data["path"] = str(result.path)
    Path(out).write_text(json.dumps(data))


def run_update(lake_dir: Path, wh: Path, full: bool, sql: Path, work: Path) -> dict:
    """warehouse.update in a subprocess; its result with the child's peak RSS (wait4)."""
    out = work / f"update-{secrets.token_hex(3)}.json"
    argv = [sys.executable, __file__, "--child-update", str(lake_dir), str(wh), str(sql), str(out)]
    if full:
        argv.append("--full")
    start = time.perf_counter()
    proc = subprocess.Popen(argv)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall_s = time.perf_counter() - start
    if proc.returncode != 0 or not out.exists():
        return {"error": f"exit code {proc.returncode}", "process_s": wall_s}
    result = json.loads(out.read_text())
    result["rss_bytes"] = usage.ru_maxrss * 1024  # kB on Linux
    result["process_s"] = wall_s
    return result


def describe(result: dict) -> str:
    """One line for an update's result."""
    if "error" in result:
        return f"FAILED ({result['error']}, {result['process_s']:.1f} s)"
    return (
        f"mode {result['mode']} ({result['reason']}), {result['runs_added']:,} runs, "
        f"{result['files_read']:,} files read; wall {result['wall_s']:.2f} s "
        f"(load {result['load_s']:.2f} s, models {result['models_s']:.2f} s; process "
        f"{result['process_s']:.1f} s with imports); peak RSS {result['rss_bytes'] / GiB:.2f} GiB"
    )


def verdict(ok: bool) -> str:
    """meets / MISSES."""
    return "meets" if ok else "MISSES"


def measure(days: int, args: argparse.Namespace, shape: Shape, sql: Path, work: Path) -> dict:
    """(a)-(c) for a lake of `days` days: stats, rebuild, tonight, compaction, incremental."""
    tag = f"[{days} d x {args.envs} envs]"
    store = shape.store(args.root)
    units = lake_units(days, args.envs, args.detail_days)
    generated, gen_s = ensure_units(store, units, shape, args.workers)
    lake_dir, wh = work / f"lake-{days}", work / f"warehouse-{days}.duckdb"
    start = time.perf_counter()
    linked = assemble(store, units, lake_dir)
    compaction.write_manifest(lake_dir)
    print(
        f"{tag} lake: {generated} units generated in {gen_s:.0f} s, {linked:,} files linked "
        f"in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    files, size, per_table = lake_stats(lake_dir)
    top = ", ".join(f"{t} {n:,}" for t, n in per_table.most_common(4))
    print(
        f"{tag} (a) lake: {files:,} files, {size / GiB:.2f} GiB (target <= {TARGET_FILES:,} "
        f"files: {verdict(files <= TARGET_FILES)}); most files: {top}",
        flush=True,
    )
    full = run_update(lake_dir, wh, True, sql, work)
    print(f"{tag} (b) full rebuild: {describe(full)}", flush=True)
    if "error" not in full:
        print(
            f"{tag}     full rebuild wall {full['wall_s']:.1f} s (target <= "
            f"{TARGET_REBUILD_S:.0f} s: {verdict(full['wall_s'] <= TARGET_REBUILD_S)})",
            flush=True,
        )
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        landed = list(
            pool.map(
                land_tonight, [str(lake_dir)] * args.envs, range(args.envs), [shape] * args.envs
            )
        )
    land_s = time.perf_counter() - start
    landed_files = sum(n for n, _ in landed)
    collections = shape.per_day * args.envs
    print(
        f"{tag} (c) tonight landed through lake.write: {collections:,} collections + "
        f"{args.envs} nightly runs = {landed_files:,} files in {land_s:.1f} s "
        f"({args.workers} processes)",
        flush=True,
    )
    report = compaction.compact(lake_dir)
    after, size_after, _ = lake_stats(lake_dir)
    per_collection = (after - files) / collections
    detail_added = 2 * args.envs  # keyspace_keys + ping_histogram of tonight's nightly runs
    print(
        f"{tag}     compaction: {report.wall_s:.1f} s ({report.summary()}); files {files:,} -> "
        f"{after:,}: {per_collection:+.4f} files per collection (target <= "
        f"{TARGET_FILES_PER_COLLECTION:.0f}: {verdict(per_collection <= 1)}; the {detail_added} "
        "nightly detail files are the whole difference until retention drops last month's)",
        flush=True,
    )
    incremental = run_update(lake_dir, wh, False, sql, work)
    print(f"{tag}     nightly incremental update: {describe(incremental)}", flush=True)
    if "error" not in incremental:
        ok_s = incremental["wall_s"] <= TARGET_INCREMENTAL_S
        ok_rss = incremental["rss_bytes"] <= TARGET_RSS_BYTES
        print(
            f"{tag}     incremental wall {incremental['wall_s']:.2f} s (target <= "
            f"{TARGET_INCREMENTAL_S:.0f} s: {verdict(ok_s)}), peak RSS "
            f"{incremental['rss_bytes'] / GiB:.2f} GiB (target <= 1 GiB: {verdict(ok_rss)})",
            flush=True,
        )
    if args.retention:
        from yardstick.storage import retention

        try:
            kept = retention.apply(lake_dir, wh, args.detail_days, today=sched.TONIGHT)
            final, _, _ = lake_stats(lake_dir)
            print(
                f"{tag}     retention: {kept.summary()}; files now {final:,} "
                f"({(final - files) / collections:+.4f} per collection)",
                flush=True,
            )
        except Exception as exc:  # the models are being converted: report, go on
            print(f"{tag}     retention failed: {type(exc).__name__}: {exc}", flush=True)
    return {"full": full, "incremental": incremental, "wh": wh, "lake": lake_dir}


def trend_query(wh: Path, env: str) -> str:
    """Median of 20 runs of the trend query on a read-only connection."""
    from yardstick.storage import warehouse

    con = warehouse.connect_read_only(wh)
    try:
        points = len(con.execute(TREND_SQL, [env]).fetchall())
        times = []
        for _ in range(20):
            start = time.perf_counter()
            con.execute(TREND_SQL, [env]).fetchall()
            times.append(time.perf_counter() - start)
    except Exception as exc:  # figure_trends may not be converted yet
        return f"trend query failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    finally:
        con.close()
    ms = 1000 * statistics.median(times)
    return (
        f"(e) trend query ({env}, rtt_client_p99_us, {points} points): median of 20 "
        f"{ms:.1f} ms (target <= {TARGET_TREND_MS:.0f} ms: {verdict(ms <= TARGET_TREND_MS)})"
    )


def main() -> None:
    """Generate or reuse the lakes, measure, and print the figures."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child-update":
        lake_dir, wh, sql, out = sys.argv[2:6]
        child_update(lake_dir, wh, "--full" in sys.argv[6:], sql, out)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=50)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--collections-per-day", type=int, default=288)
    parser.add_argument("--keys", type=int, default=200_000, help="keyspace_keys per nightly run")
    parser.add_argument("--slowlog-max-len", type=int, default=sched.SLOWLOG_MAX_LEN)
    parser.add_argument("--detail-days", type=int, default=30)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--root", type=Path, default=Path("/work/bench-tmp"))
    parser.add_argument("--no-double", action="store_true", help="skip the 2x-days lake")
    parser.add_argument("--no-retention", dest="retention", action="store_false")
    parser.add_argument("--keep", action="store_true", help="keep the work lakes and warehouses")
    args = parser.parse_args()
    if args.days * 2 > (sched.TONIGHT - sched.ORIGIN_DAY).days - 10:
        parser.error("--days too large for the generator's horizon")
    shape = Shape(args.collections_per_day, args.keys, args.slowlog_max_len)
    work = args.root / f"retention-work-{args.days}x{args.envs}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sql = copy_sql(work)
    load_1m, load_5m, _ = os.getloadavg()
    import duckdb

    print(
        f"{os.cpu_count()} cores, load {load_1m:.2f} / {load_5m:.2f} (1/5 min), duckdb "
        f"{duckdb.__version__}, pyarrow {pa.__version__}; tonight {sched.TONIGHT}, "
        f"{args.collections_per_day} collections/day, {args.keys:,} keys, SLOWLOG max len "
        f"{args.slowlog_max_len}, detail {args.detail_days} days; store "
        f"{shape.store(args.root)}",
        flush=True,
    )
    store = shape.store(args.root)
    store.mkdir(parents=True, exist_ok=True)
    print(self_check(store, shape, work), flush=True)
    results = {args.days: measure(args.days, args, shape, sql, work)}
    print(trend_query(results[args.days]["wh"], sched.env_name(0)), flush=True)
    incremental = results[args.days]["incremental"]
    if "error" not in incremental and incremental.get("nodes"):
        nodes_s = sum(n[2] for n in incremental["nodes"])
        print(
            f"(f) top 10 dbt nodes of the {args.days}-day incremental update "
            f"({len(incremental['nodes'])} nodes, {nodes_s:.2f} s of node time in "
            f"{incremental['models_s']:.2f} s of dbt; the rest is dbt's own start, parse and "
            "per-node overhead):"
        )
        for unique_id, status, seconds in sorted(incremental["nodes"], key=lambda n: -n[2])[:10]:
            print(f"    {seconds:8.2f} s  {status:8}  {unique_id}")
    if not args.keep:
        shutil.rmtree(results[args.days]["lake"], ignore_errors=True)
    if not args.no_double:
        double = 2 * args.days
        results[double] = measure(double, args, shape, sql, work)
        one, two = results[args.days]["incremental"], results[double]["incremental"]
        if "error" not in one and "error" not in two:
            change = two["wall_s"] / one["wall_s"] - 1
            print(
                f"(d) incremental {double} d / {args.days} d: {two['wall_s']:.2f} s / "
                f"{one['wall_s']:.2f} s = {change:+.1%} (target <= +{TARGET_DOUBLING:.0%}: "
                f"{verdict(change <= TARGET_DOUBLING)}); load {two['load_s']:.2f} / "
                f"{one['load_s']:.2f} s, models {two['models_s']:.2f} / {one['models_s']:.2f} s",
                flush=True,
            )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
