"""History at scale: a year (and two) of nightly runs plus collections every 5 minutes for 50
environments, in the lake's steady state after compaction; then the warehouse's full rebuild,
and nights landed for real (delta.write), each followed by compaction, the nightly incremental
update and retention, as the nightly flow does: tonight (the first update after the rebuild),
then --rounds warm nights on each lake, the year's and the two years', interleaved (their
order rotated each round; the warm figure is their median); a trend query. Figures printed
and written as JSON (--json; bench/readme_table.py turns it into docs/scale.md's table).

    .venv/bin/python bench/retention.py [--envs 50] [--days 365] [--collections-per-day 288]
        [--keys 200000] [--detail-days 30] [--workers 2] [--root /work/bench-tmp] [--no-double]
        [--rounds 3] [--json PATH]

Small check: --tiny (--envs 2 --days 4 --collections-per-day 4 --keys 500 --rounds 1
--no-double: nearly all of it the warehouse updates; tests/test_benches.py runs it).

Nights and collections are shaped like real ones (tests/lakes/schedule.py, from
bench/real_shape.json: every table a real scratch nightly, read-only nightly and collection
landed, with their row counts; collections land only the SLOWLOG entries and latency samples
new since the last). The self-check fails the bench (exit 1) when the tool declares a table
the real shape has never seen (any table of yardstick/storage/schemas.py, a family's or the
run's own such as family_load: the message names it and says how to re-take the shape), or
when a table the real run landed is not generated; and when landing and compacting with
yardstick.storage gives other rows, or more files, than the direct writer.

The lake is assembled from a store of generated units (one environment's month as compaction
leaves it: one data file per table, sorted by run id; one night's detail files, one per run)
kept under <root>/retention-store-*, keyed by the generator (its version, the real shape and
every file schema), collections per day, keys and SLOWLOG length; a unit is the same whatever
the lake's length, so the 730-day lake reuses the 365-day lake's months. Each measurement
works on a fresh lake of hard links whose files are added to each table's Delta log in one
commit (deltalake.convert_to_deltalake), so compaction never touches the store. Nights are
landed as the flows land them: each collection of every environment one commit per table
(delta.batch), the nightly run environment by environment. The SQL project is copied at start
and the updates run on that copy: edits to sql/ during a long run do not turn the incremental
update into a rebuild. Each update runs in a child process, whose own peak RSS (wait4) is the
figure. The lake's files are every file on disk, the tables' _delta_log included.

Targets (issues: history at scale, and its step three; 50 environments x 365 days): full
rebuild (closed days imported from the lake's derived tables) <= 60 s and <= 2 GiB peak RSS;
the rebuild from the raw rows (after a change of the SQL models) is reported beside it;
nightly incremental update <= 10 s and <= 1 GiB, changing <= 10 % when the
history doubles; the first update after a rebuild within 20 % of a warm one; lake <= 30,000
files; one collection adds <= 1 file after compaction and <= 10 SLOWLOG rows when nothing new
was logged; trend query <= 100 ms."""

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
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402 - beside this file, not a package
from _harness import Bench, copy_sql  # noqa: E402
from lakes import schedule as sched  # noqa: E402

from yardstick.storage import compaction, delta  # noqa: E402
from yardstick.storage.lakefs import Lake  # noqa: E402
from yardstick.storage.schemas import file_schema  # noqa: E402

GiB = float(1 << 30)
# name: (what the issue asks, limit, unit of the figure). All "at most"; first_vs_warm and the
# doubling are changes (shares: 0.10 = 10 %), first_vs_warm compared by size either way.
TARGETS = {
    # The rebuild from the lake's derived days (closed days imported, the open day derived).
    "rebuild_wall_s": ("full rebuild <= 60 s", 60.0, "s"),
    "rebuild_rss_bytes": ("full rebuild peak memory <= 2 GiB", 2 * GiB, "bytes"),
    "incremental_wall_s": ("nightly incremental update <= 10 s", 10.0, "s"),
    "incremental_rss_bytes": ("nightly update peak memory <= 1 GiB", 1 * GiB, "bytes"),
    # The update's own process (imports included, as the bench's child pays them), CPU-s.
    "incremental_cpu_s": ("nightly incremental update <= 5 CPU-s", 5.0, "CPU-s"),
    "doubling_change": ("doubling the history changes the update <= 10 %", 0.10, "share"),
    "first_vs_warm_change": (
        "first update after a rebuild within 20 % of a warm one", 0.20, "share"
    ),
    "lake_files": ("lake <= 30,000 files", 30_000, "files"),
    "files_per_collection": ("one collection adds <= 1 file after compaction", 1.0, "files"),
    "slowlog_rows_quiet_collection": (
        "<= 10 SLOWLOG rows per collection when nothing new was logged", 10, "rows"
    ),
    "trend_query_ms": ("trend query <= 100 ms", 100.0, "ms"),
}  # fmt: skip
TREND_SQL = (
    "select started_at, value from figure_trends where env = ? and figure = 'rtt_client_p99_us'"
    " and subject = '' order by started_at"
)


@dataclass(frozen=True)
class Shape:
    """What a generated unit depends on besides its environment and days."""

    per_day: int
    keys: int
    max_len: int

    def store(self, root: Path) -> Path:
        """Where units of this shape are kept."""
        return root / (
            f"retention-store-g{sched.generator_key()}-c{self.per_day}-k{self.keys}"
            f"-l{self.max_len}"
            f"-t{sched.TONIGHT:%Y%m%d}"
        )


# -- generation -----------------------------------------------------------------------------


def history_days(days: int) -> list[date]:
    """The days a lake of `days` days holds: the `days` before tonight."""
    return [sched.TONIGHT - timedelta(days=days - i) for i in range(days)]


def unit_name(period: str, days: list[date]) -> str:
    """A month unit's folder name: its period and first and last day."""
    return f"{period}_{days[0]:%d}-{days[-1]:%d}"


def run_spans(data: pa.Table) -> list[tuple[str, int, int]]:
    """A table sorted by run_id as (run id, first row, rows) per run."""
    ids = data["run_id"].to_numpy(zero_copy_only=False)
    if not len(ids):
        return []
    cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    starts = [0, *cuts.tolist()]
    ends = [*cuts.tolist(), len(ids)]
    return [(str(ids[a]), a, b - a) for a, b in zip(starts, ends, strict=True)]


def split_runs(data: pa.Table) -> list[tuple[str, pa.Table]]:
    """A table sorted by run_id as (run id, its rows without run_id and schema_version)."""
    body = data.drop_columns(["run_id", "schema_version"])
    return [(run_id, body.slice(a, n)) for run_id, a, n in run_spans(data)]


class RunRows(Mapping):
    """run id -> table -> rows of one environment's generated tables, sliced (zero-copy) when
    asked from the merged tables. Sent between processes as the merged tables and the spans:
    a day of 288 collections sent as ~2,600 small Arrow tables per environment held 1.34 GiB
    in the bench's process for 2 environments (0.16 GiB merged), ~10 GiB at 10."""

    def __init__(self, merged: dict[str, pa.Table], detail: dict[str, dict[str, pa.Table]]):
        self.bodies = {t: d.drop_columns(["run_id", "schema_version"]) for t, d in merged.items()}
        self.detail = detail
        self.spans: dict[str, dict[str, tuple[int, int]]] = {}
        for table, data in merged.items():
            for run_id, start, rows in run_spans(data):
                self.spans.setdefault(run_id, {})[table] = (start, rows)
        for run_id in detail:
            self.spans.setdefault(run_id, {})

    def __getitem__(self, run_id: str) -> dict[str, pa.Table]:
        tables = {t: self.bodies[t].slice(a, n) for t, (a, n) in self.spans[run_id].items()}
        return {**tables, **self.detail.get(run_id, {})}

    def __iter__(self):
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self.spans)


def write_unit_file(root: Path, table: str, env: str, period: str, data: pa.Table) -> Path:
    """One partition's data file as compaction leaves it (Delta's optimize: one file per
    table, environment and month, sorted by run id): plain Parquet without the partition
    columns, added to its table's log when the lake is assembled (`assemble`)."""
    data = data.sort_by([("run_id", "ascending")])
    final = root / table / f"env={env}" / f"period={period}" / f"part-00000-{period}-unit.parquet"
    final.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data.select(file_schema(table).names).cast(file_schema(table)), final)
    return final


def build_unit(store: str, index: int, period: str, days: list[date], shape: Shape) -> float:
    """Generate one environment's month (one data file per table) into the store; seconds."""
    start = time.perf_counter()
    env = sched.env_name(index)
    final = Path(store) / "units" / f"env={env}" / unit_name(period, days)
    if final.is_dir():
        return 0.0
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(2)}")
    merged, _ = sched.day_tables(index, days, shape.per_day, shape.keys, shape.max_len)
    for table, data in merged.items():
        write_unit_file(tmp, table, env, period, data)
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
    """One night's detail files (keyspace_keys, ping_histogram: a data file per run, never
    compacted) into the store."""
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
            rows = delta.prepare(table, env, run_id, data).drop_columns(["env", "period"])
            folder = tmp / table / f"env={env}" / f"period={delta.run_period(run_id)}"
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows, folder / f"part-00000-{run_id}-detail.parquet")
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
    """A fresh lake of hard links to the units, each table's files then added to a new Delta
    table's log in one commit (deltalake.convert_to_deltalake: no data file rewritten) and
    checkpointed; the number of data files."""
    from deltalake import DeltaTable, Field, Schema, convert_to_deltalake

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
    partitions = Schema([Field("env", "string"), Field("period", "string")])
    for table in sorted(p.name for p in lake_dir.iterdir() if p.is_dir()):
        convert_to_deltalake(
            str(lake_dir / table),
            partition_by=partitions,
            partition_strategy="hive",
            configuration=delta.TABLE_CONFIG,
        )
        DeltaTable(str(lake_dir / table)).create_checkpoint()
    return files


def night_tables(index: int, shape: Shape, day: date) -> dict:
    """One environment's day (its collections and nightly run) as run id -> table -> rows, and
    its SLOWLOG figures; generated in a worker process."""
    env = sched.env_name(index)
    merged, detail = sched.day_tables(
        index, [day], shape.per_day, shape.keys, shape.max_len, frozenset([day])
    )
    runs = RunRows(merged, detail)
    return {"env": env, "runs": runs, **slowlog_per_collection(merged, shape.per_day)}


def land_day(lake_dir: str, days: list[dict]) -> tuple[int, int]:
    """Land the environments' day as the flows do: each collection of every environment as one
    commit per table (delta.batch, as yardstick/flows/collect.py), the nightly run environment by
    environment, table by table; (tables landed, commits)."""
    run_ids = sorted({run for d in days for run in d["runs"]})
    landed = commits = 0
    for run_id in run_ids:
        per_env = [(d["env"], d["runs"][run_id]) for d in days if run_id in d["runs"]]
        if "-c" in run_id:
            with delta.batch(Lake.at(lake_dir), f"collection {run_id}") as held:
                for env, tables in per_env:
                    for table, rows in tables.items():
                        landed += (
                            delta.write(Lake.at(lake_dir), table, env, run_id, rows) is not None
                        )
            commits += len(held.parts)
            continue
        for env, tables in per_env:
            order = sorted(tables, key=lambda t: (t == "runs", t == "steps", t))
            for table in order:
                written = (
                    delta.write(Lake.at(lake_dir), table, env, run_id, tables[table]) is not None
                )
                landed += written
                commits += written
    return landed, commits


def slowlog_per_collection(merged: dict[str, pa.Table], per_day: int) -> dict:
    """SLOWLOG rows each collection landed: overall, and in the collections of a queue where
    nothing new was logged since the one before (the cursor already at the newest id)."""
    reads = merged["slowlog_collections"].to_pydict()
    entries = Counter(merged["slowlog_entries"]["run_id"].to_pylist())
    quiet, every = [], []
    if "newest_queued_id" not in reads:  # a schema without the cursor: quiet ones unknown
        reads["newest_queued_id"] = reads["landed_above_id"] = [-1] * len(reads["run_id"])
    newest, cursor = reads["newest_queued_id"], reads["landed_above_id"]
    for run_id, top, above in zip(reads["run_id"], newest, cursor, strict=True):
        if "-c" not in run_id:
            continue  # the nightly run's own read
        every.append(entries[run_id])
        if top == -1:
            continue
        if top is None or (above is not None and above >= top):
            quiet.append(entries[run_id])
    return {
        "collections": len(every),
        "slowlog_rows": sum(every),
        "quiet_collections": len(quiet),
        "slowlog_rows_quiet_max": max(quiet, default=0),
    }


# -- self-check ----------------------------------------------------------------------------


def shape_check(shape: Shape) -> dict:
    """The generated runs against the real ones (bench/real_shape.json): every table the tool
    declares is known to the shape, and every table the real run landed is generated; rows per
    table side by side. `problems` non-empty fails the bench."""
    problems = sched.unknown_table_problems()
    day = sched.TONIGHT - timedelta(days=1)
    # A scratch and a read-only environment, both with the latency monitor on.
    scratch, read_only = 0, 9
    generated = {
        "scratch_nightly": sched.nightly_run(
            scratch, day, shape.per_day, shape.keys, shape.max_len, True
        ),
        "read_only_nightly": sched.nightly_run(
            read_only, day, shape.per_day, shape.keys, shape.max_len, True
        ),
        "scratch_collection": sched.collection_tables(scratch, [day], shape.per_day),
        "read_only_collection": sched.collection_tables(read_only, [day], shape.per_day),
    }
    kinds = {}
    for kind, tables in generated.items():
        real = sched.kind_shape(kind)["rows"]
        runs = shape.per_day if kind.endswith("_collection") else 1
        rows = {t: round(d.num_rows / runs, 2) for t, d in tables.items()}
        missing = sorted(
            t for t, n in real.items() if n and t not in rows and t not in sched.STREAM_TABLES
        )
        if missing:
            problems.append(f"{kind}: the real run lands {', '.join(missing)}; not generated")
        kinds[kind] = {
            "tables_real": sum(1 for n in real.values() if n),
            "tables_generated": len(rows),
            "rows": {t: [rows.get(t, 0), real.get(t, 0)] for t in sorted(set(real) | set(rows))},
            "not_in_real": sorted(t for t in rows if not real.get(t)),
        }
    return {"ok": not problems, "problems": problems, "kinds": kinds}


def self_check(store: Path, shape: Shape, work: Path) -> dict:
    """Land one environment's two days as the flows do, compact them with
    yardstick.storage.compaction, and compare every table's rows and files with what the
    direct writer makes of the same days (one data file per table and month)."""
    from deltalake import DeltaTable

    mark = store / ".self-check.json"
    if mark.exists():
        return {**json.loads(mark.read_text()), "cached": True}
    days = [sched.TONIGHT - timedelta(days=2), sched.TONIGHT - timedelta(days=1)]
    landed = work / "check-landed"
    shutil.rmtree(landed, ignore_errors=True)
    merged, _ = sched.day_tables(0, days, shape.per_day, shape.keys, shape.max_len)
    env = sched.env_name(0)
    runs: dict[str, dict[str, pa.Table]] = {}
    for table, data in merged.items():
        for run_id, rows in split_runs(data):
            runs.setdefault(run_id, {})[table] = rows
    land_day(str(landed), [{"env": env, "runs": runs}])
    compaction.compact(Lake.at(landed), vacuum_hours=0)
    problems, compared = [], 0
    for table, data in merged.items():
        files = delta.data_files(Lake.at(landed), table)
        if len(files) != 1:
            problems.append(f"{table}: {len(files)} data files after compaction, not 1")
        ours = data.sort_by([("run_id", "ascending")]).select(file_schema(table).names)
        theirs = DeltaTable(str(landed / table)).to_pyarrow_table()
        theirs = theirs.select(file_schema(table).names).cast(file_schema(table))
        theirs = theirs.sort_by([("run_id", "ascending")])
        key = [c for c in file_schema(table).names]
        if ours.num_rows != theirs.num_rows or sorted(
            map(repr, ours.select(key).to_pylist())
        ) != sorted(map(repr, theirs.select(key).to_pylist())):
            problems.append(f"{table}: rows differ")
        compared += 1
    shutil.rmtree(landed, ignore_errors=True)
    result = {
        "ok": not problems,
        "problems": problems,
        "tables_compared": compared,
        "text": (
            f"{compared} tables of one environment's two days landed as the flows land them and "
            "compacted by yardstick.storage.compaction hold the direct writer's rows, one data "
            "file per table and month"
        ),
    }
    if not problems:
        mark.write_text(json.dumps(result))
    return result


# -- measurement -----------------------------------------------------------------------------


def lake_stats(lake_dir: Path) -> tuple[int, int, Counter]:
    """Every file of the lake on disk (the tables' _delta_log folders included), bytes, and
    files per table."""
    files, size, per_table = 0, 0, Counter()
    for folder, _dirs, names in os.walk(lake_dir):
        rel = Path(folder).relative_to(lake_dir)
        for name in names:
            files += 1
            size += (Path(folder) / name).stat().st_size
            per_table[rel.parts[0] if rel.parts else name] += 1
    return files, size, per_table


def data_files(lake_dir: Path) -> int:
    """Data files on disk (every file outside the tables' _delta_log folders)."""
    return sum(
        len(names) for folder, _dirs, names in os.walk(lake_dir) if "_delta_log" not in folder
    )


# dbt's state (parse cache, lock) for the updates: None, beside the SQL copy (never shared
# with other processes); --tiny keeps the caller's (main() sets it).
SHARED_DBT_STATE: str | None = None


def child_update(
    lake_dir: str, wh: str, full: bool, sql: str, out: str, dbt_state: str | None = None
) -> None:
    """Run warehouse.update in this (child) process on the SQL copy; write the result."""
    os.environ["YARDSTICK_DBT_STATE"] = dbt_state or str(Path(sql).parent / "dbt-state")
    from yardstick.storage import dbt, warehouse

    dbt.project_dir = lambda: Path(sql)  # the copy taken at the bench's start
    result = warehouse.update(Lake.at(lake_dir), wh, full=full)
    data = asdict(result)
    data["path"] = str(result.path)
    # This process's own peak (VmHWM): wait4's ru_maxrss starts from the parent's RSS at the
    # spawn (the bench's own, GiBs after landing a night), which read as the update's.
    data["own_rss_bytes"] = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    Path(out).write_text(json.dumps(data, default=str))


def run_update(lake_dir: Path, wh: Path, full: bool, sql: Path, work: Path) -> dict:
    """warehouse.update in a subprocess; its result with the child's own peak RSS and CPU
    seconds (wait4: the figures load does not inflate)."""
    out = work / f"update-{secrets.token_hex(3)}.json"
    argv = [sys.executable, __file__, "--child-update", str(lake_dir), str(wh), str(sql), str(out)]
    if full:
        argv.append("--full")
    if SHARED_DBT_STATE:
        argv += ["--dbt-state", SHARED_DBT_STATE]
    start = time.perf_counter()
    proc = subprocess.Popen(argv)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall_s = time.perf_counter() - start
    if proc.returncode != 0 or not out.exists():
        return {"error": f"exit code {proc.returncode}", "process_s": wall_s}
    result = json.loads(out.read_text())
    # The child's own peak; ru_maxrss (kB) counts the bench's pages at the spawn too.
    result["rss_bytes"] = result.pop("own_rss_bytes", usage.ru_maxrss * 1024)
    result["maxrss_with_parent_bytes"] = usage.ru_maxrss * 1024
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
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
        f"{result['process_s']:.1f} s with imports, {result['cpu_s']:.1f} CPU-s); "
        f"peak RSS {result['rss_bytes'] / GiB:.2f} GiB; {result.get('parse_mode', '')}"
    )


def night(
    tag: str, name: str, day: date, lake_dir: Path, wh: Path, files_before: int,
    args: argparse.Namespace, shape: Shape, sql: Path, work: Path,
) -> dict:  # fmt: skip
    """One night as the nightly flow runs it: the day's collections and nightly run landed,
    compaction, the incremental update, retention; its figures."""
    data_before = data_files(lake_dir)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        landed = list(
            pool.map(night_tables, range(args.envs), [shape] * args.envs, [day] * args.envs)
        )
    start = time.perf_counter()
    tables_landed, commits = land_day(str(lake_dir), landed)
    land_s = time.perf_counter() - start
    collections = sum(x["collections"] for x in landed)
    slowlog = {
        "collections": collections,
        "rows": sum(x["slowlog_rows"] for x in landed),
        "rows_per_collection": sum(x["slowlog_rows"] for x in landed) / max(1, collections),
        "quiet_collections": sum(x["quiet_collections"] for x in landed),
        "rows_quiet_max": max(x["slowlog_rows_quiet_max"] for x in landed),
    }
    print(
        f"{tag} {name} ({day}) landed through delta.write: {collections:,} collections + "
        f"{args.envs} nightly runs = {tables_landed:,} tables in {commits:,} commits in "
        f"{land_s:.1f} s; "
        f"SLOWLOG {slowlog['rows_per_collection']:.2f} rows per collection, at most "
        f"{slowlog['rows_quiet_max']} in the {slowlog['quiet_collections']:,} with nothing new",
        flush=True,
    )
    # Vacuumed at once: in the nightly schedule the files a compaction replaced are deleted by
    # the next one a day later (an hour's retention); the bench's night lasts minutes.
    report = compaction.compact(Lake.at(lake_dir), vacuum_hours=0)
    after, _size, _ = lake_stats(lake_dir)
    data_after = data_files(lake_dir)
    # Data files (the target's meaning), the log's commit files apart: a day's commits are
    # expired by the checkpoints of the day after (delta.logRetentionDuration), which a lake
    # assembled in one commit has not reached yet.
    per_collection = (data_after - data_before) / max(1, collections)
    log_per_collection = ((after - data_after) - (files_before - data_before)) / max(1, collections)
    print(
        f"{tag}     compaction: {report.wall_s:.1f} s ({report.summary()}); files "
        f"{files_before:,} -> {after:,}: data files {per_collection:+.4f} per collection (the "
        "nightly detail files are the difference until retention drops last month's), log "
        f"files {log_per_collection:+.2f} per collection (until the log retention expires them)",
        flush=True,
    )
    update = run_update(lake_dir, wh, False, sql, work)
    print(f"{tag}     incremental update: {describe(update)}", flush=True)
    out = {
        "day": day,
        "files_landed": tables_landed,
        "commits": commits,
        "land_s": land_s,
        "slowlog": slowlog,
        "compaction_s": report.wall_s,
        "compaction": report.summary(),
        "files_before": files_before,
        "files_after_compaction": after,
        "files_per_collection": per_collection,
        "log_files_per_collection": log_per_collection,
        "update": update,
    }
    if args.retention:
        from yardstick.storage import retention

        try:
            kept = retention.apply(Lake.at(lake_dir), wh, args.detail_days, today=day)
            out["retention"] = kept.summary()
        except Exception as exc:  # the models are being converted: report, go on
            out["retention"] = f"failed: {type(exc).__name__}: {exc}"
        out["files_after_retention"] = lake_stats(lake_dir)[0]
        print(f"{tag}     retention: {out['retention']}", flush=True)
    return out


def measure(days: int, args: argparse.Namespace, shape: Shape, sql: Path, work: Path) -> dict:
    """A lake of `days` days: stats, full rebuild, then tonight (the first update after the
    rebuild); the warm nights follow in `warm_rounds`."""
    tag = f"[{days} d x {args.envs} envs]"
    store = shape.store(args.root)
    units = lake_units(days, args.envs, args.detail_days)
    generated, gen_s = ensure_units(store, units, shape, args.workers)
    lake_dir, wh = work / f"lake-{days}", work / f"warehouse-{days}.duckdb"
    if SHARED_DBT_STATE:  # the tests' warehouses' name: their kept empty warehouse and plan
        wh = work / f"warehouse-{days}" / "w.duckdb"
        wh.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    linked = assemble(store, units, lake_dir)
    print(
        f"{tag} lake: {generated} units generated in {gen_s:.0f} s, {linked:,} files linked "
        f"in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    files, size, per_table = lake_stats(lake_dir)
    top = ", ".join(f"{t} {n:,}" for t, n in per_table.most_common(4))
    print(f"{tag} lake: {files:,} files, {size / GiB:.2f} GiB; most files: {top}", flush=True)
    # The first rebuild derives every day from the raw rows (as after a change of the SQL
    # models) and keeps the closed days in the lake; the second, the rebuild a report, a
    # late site or a lost warehouse asks for, imports them and derives only the open day.
    rederive = run_update(lake_dir, wh, True, sql, work)
    print(f"{tag} full rebuild from the raw rows: {describe(rederive)}", flush=True)
    full = run_update(lake_dir, wh, True, sql, work)
    print(f"{tag} full rebuild from the derived days: {describe(full)}", flush=True)
    first = night(tag, "tonight", sched.TONIGHT, lake_dir, wh, files, args, shape, sql, work)
    return {
        "days": days,
        "envs": args.envs,
        "tag": tag,
        "lake": {"files": files, "bytes": size, "files_per_table": dict(per_table.most_common())},
        "units_generated": generated,
        "generate_s": gen_s,
        "rebuild": full,
        "rederive": rederive,
        "first_night": first,
        "warm_nights": [],
        "wh": wh,
        "lake_dir": lake_dir,
    }


def warm_rounds(
    results: dict[int, dict], args: argparse.Namespace, shape: Shape, sql: Path, work: Path
) -> None:
    """The warm nights: night after night on every lake, the lakes' order rotated each round
    (so a change in the machine's load falls on every history length alike)."""

    def one(days: int) -> float:
        """The next warm night on the lake of `days` days; its update's wall seconds."""
        run = results[days]
        day = sched.TONIGHT + timedelta(days=1 + len(run["warm_nights"]))
        files = lake_stats(run["lake_dir"])[0]
        done = night(
            run["tag"], "warm night", day, run["lake_dir"], run["wh"], files, args, shape, sql,
            work,
        )  # fmt: skip
        run["warm_nights"].append(done)
        return done["update"].get("wall_s", float("nan"))

    _harness.interleaved({str(d): (lambda d=d: one(d)) for d in results}, args.rounds)


def trend_query(wh: Path, env: str) -> dict:
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
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    finally:
        con.close()
    return {"env": env, "points": points, "ms": 1000 * statistics.median(times), "repeats": 20}


def _wall(update: dict) -> float | None:
    """An update's wall seconds (None if it failed)."""
    return None if "error" in update else update["wall_s"]


def median_update(nights: list[dict]) -> dict:
    """The update of median wall time among `nights` (failed ones first: any failure shows),
    with the peak RSS of them all."""
    updates = [n["update"] for n in nights]
    failed = [u for u in updates if "error" in u]
    if failed or not updates:
        return failed[0] if failed else {"error": "no warm night"}
    chosen = sorted(updates, key=lambda u: u["wall_s"])[(len(updates) - 1) // 2]
    return {**chosen, "rss_bytes": max(u["rss_bytes"] for u in updates),
            "walls_s": [u["wall_s"] for u in updates]}  # fmt: skip


def figures(results: dict[int, dict], days: int, trend: dict) -> dict:
    """The headline figures, flat (what the targets and docs/scale.md's table read); a warm
    update is the median of the warm nights."""
    base = results[days]
    rebuild, first = base["rebuild"], base["first_night"]["update"]
    warm = median_update(base["warm_nights"])
    first_s, warm_s = _wall(first), _wall(warm)
    out = {
        "envs": base["envs"],
        "days": days,
        "lake_files": base["lake"]["files"],
        "lake_bytes": base["lake"]["bytes"],
        "files_per_table": base["lake"]["files_per_table"],
        "rebuild_wall_s": _wall(rebuild),
        "rebuild_load_s": rebuild.get("load_s"),
        "rebuild_models_s": rebuild.get("models_s"),
        "rebuild_batches": rebuild.get("batches"),
        "rebuild_rss_bytes": rebuild.get("rss_bytes"),
        "rebuild_cpu_s": rebuild.get("cpu_s"),
        "rebuild_from_derived_runs": rebuild.get("from_derived"),
        "rederive_wall_s": _wall(base["rederive"]),
        "rederive_cpu_s": base["rederive"].get("cpu_s"),
        "rederive_rss_bytes": base["rederive"].get("rss_bytes"),
        "incremental_wall_s": warm_s,
        "incremental_walls_s": warm.get("walls_s"),
        "incremental_load_s": warm.get("load_s"),
        "incremental_models_s": warm.get("models_s"),
        "incremental_rss_bytes": max(warm.get("rss_bytes", 0), first.get("rss_bytes", 0)) or None,
        "incremental_cpu_s": warm.get("cpu_s"),
        "first_update_cpu_s": first.get("cpu_s"),
        "first_update_wall_s": first_s,
        "warm_update_wall_s": warm_s,
        "first_vs_warm_change": first_s / warm_s - 1 if first_s and warm_s else None,
        "files_per_collection": base["first_night"]["files_per_collection"],
        "files_per_collection_warm": [n["files_per_collection"] for n in base["warm_nights"]],
        "log_files_per_collection": base["first_night"].get("log_files_per_collection"),
        "slowlog_rows_per_collection": base["first_night"]["slowlog"]["rows_per_collection"],
        "slowlog_rows_quiet_collection": max(
            n["slowlog"]["rows_quiet_max"] for n in [base["first_night"], *base["warm_nights"]]
        ),
        "quiet_collections": sum(
            n["slowlog"]["quiet_collections"] for n in [base["first_night"], *base["warm_nights"]]
        ),
        "trend_query_ms": trend.get("ms"),
        "trend_points": trend.get("points"),
        "top_nodes": sorted(warm.get("nodes", []), key=lambda n: -n[2])[:10],
        "top_rebuild_nodes": sorted(rebuild.get("nodes", []), key=lambda n: -n[2])[:10],
        "doubled_days": None,
        "doubling_change": None,
        "doubled_incremental_wall_s": None,
        "doubled_rebuild_wall_s": None,
        "doubled_rebuild_rss_bytes": None,
        "doubled_lake_files": None,
    }
    double = results.get(2 * days)
    if double:
        two = _wall(median_update(double["warm_nights"]))
        out.update(
            doubled_days=2 * days,
            doubled_incremental_wall_s=two,
            doubling_change=two / warm_s - 1 if two and warm_s else None,
            doubled_rebuild_wall_s=_wall(double["rebuild"]),
            doubled_rebuild_rss_bytes=double["rebuild"].get("rss_bytes"),
            doubled_lake_files=double["lake"]["files"],
        )
    return out


def targets(figs: dict) -> list[dict]:
    """Each target with the figure measured and whether it is met (None: not measured)."""
    out = []
    for name, (text, limit, unit) in TARGETS.items():
        value = figs.get(name)
        if value is None:
            met = None
        elif name == "first_vs_warm_change":
            met = abs(value) <= limit
        else:
            met = value <= limit
        out.append({"name": name, "target": text, "limit": limit, "unit": unit,
                    "measured": value, "met": met})  # fmt: skip
    return out


def print_figures(figs: dict, goals: list[dict]) -> None:
    """The targets, one line each."""
    print(f"targets (issue: 50 environments x 365 days), measured at {figs['envs']} x "
          f"{figs['days']} days:")  # fmt: skip
    for goal in goals:
        value, unit = goal["measured"], goal["unit"]
        if value is None:
            shown = "not measured"
        elif unit == "bytes":
            shown = f"{value / GiB:.2f} GiB"
        elif unit == "share":
            shown = f"{value:+.1%}"
        else:
            shown = f"{value:,.2f} {unit}"
        state = {True: "meets", False: "MISSES", None: "-"}[goal["met"]]
        print(f"    {goal['target']:64} {shown:>16}  {state}")
    if figs["top_nodes"]:
        print("top dbt nodes of the warm incremental update:")
        for unique_id, status, seconds in figs["top_nodes"]:
            print(f"    {seconds:8.2f} s  {status:8}  {unique_id}")


def main() -> None:
    """Generate or reuse the lakes, measure, print the figures and write them as JSON."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child-update":
        lake_dir, wh, sql, out = sys.argv[2:6]
        rest = sys.argv[6:]
        state = rest[rest.index("--dbt-state") + 1] if "--dbt-state" in rest else None
        child_update(lake_dir, wh, "--full" in rest, sql, out, state)
        return
    harness = Bench(
        "retention", __doc__, rounds=3, tiny="2 environments x 4 days, the history not doubled"
    )
    parser = harness.parser
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
    args = harness.parse()
    if args.tiny:
        # 4 collections a day still make 2 quiet ones a night (the quiet-collection check has
        # something to check); the doubled lake's rebuilds would triple the run's time.
        args.envs, args.days, args.collections_per_day, args.keys = 2, 4, 4, 500
        args.rounds, args.workers, args.no_double = 1, 1, True
        # The caller's dbt cache where it has one (the tests'): the first rebuild, its
        # warehouse named as theirs are, starts from the empty warehouse and plan kept there
        # (yardstick/storage/kept.py), not from a cold dbt build of the models.
        global SHARED_DBT_STATE
        SHARED_DBT_STATE = os.environ.get("YARDSTICK_DBT_STATE") or None
    if args.days * 2 > (sched.TONIGHT - sched.ORIGIN_DAY).days - 10:
        parser.error("--days too large for the generator's horizon")
    if not 1 <= args.rounds < sched.AFTER_DAYS:
        parser.error(f"--rounds: 1 to {sched.AFTER_DAYS - 1} (nights the generator covers)")
    json_path = args.json or args.root / f"retention-{args.envs}x{args.days}.json"
    shape = Shape(args.collections_per_day, args.keys, args.slowlog_max_len)
    work = args.root / f"retention-work-{args.days}x{args.envs}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sql = copy_sql(work)
    record = {
        "size": {
            "envs": args.envs, "days": args.days, "collections_per_day": args.collections_per_day,
            "keys": args.keys, "slowlog_max_len": args.slowlog_max_len,
            "detail_days": args.detail_days, "workers": args.workers, "double": not args.no_double,
            "rounds": args.rounds,
        },
        "environment": _harness.environment_record(),  # printed below; the harness's too
        "real_shape": sched.real_shape()["taken"],
        "tonight": sched.TONIGHT,
    }  # fmt: skip
    machine, git = record["environment"]["machine"], record["environment"]["git"]
    print(
        f"{machine['cores']} cores, load {machine['load_1m']:.2f} / {machine['load_5m']:.2f} "
        f"(1/5 min), {record['environment']['versions']}; git {git['commit']}"
        f"{' + modified ' + ', '.join(git['modified']) if git['modified'] else ''}; tonight "
        f"{sched.TONIGHT}, {args.collections_per_day} collections/day, {args.keys:,} keys, "
        f"SLOWLOG max len {args.slowlog_max_len}, detail {args.detail_days} days; store "
        f"{shape.store(args.root)}",
        flush=True,
    )
    store = shape.store(args.root)
    store.mkdir(parents=True, exist_ok=True)
    checks = {"shape": shape_check(shape), "compaction": self_check(store, shape, work)}
    record["self_check"] = {"ok": all(c["ok"] for c in checks.values()), **checks}
    for name, check in checks.items():
        state = "ok" if check["ok"] else "FAILED: " + "; ".join(check["problems"])
        print(f"self-check ({name}): {state}", flush=True)
    for kind, data in checks["shape"]["kinds"].items():
        print(f"    {kind}: {data['tables_generated']} tables generated, "
              f"{data['tables_real']} in the real run", flush=True)  # fmt: skip
    if not record["self_check"]["ok"]:
        harness.write(json_path, record)
        raise SystemExit(f"self-check failed (see above); figures not measured; {json_path}")
    results = {args.days: measure(args.days, args, shape, sql, work)}
    if not args.no_double:
        results[2 * args.days] = measure(2 * args.days, args, shape, sql, work)
    warm_rounds(results, args, shape, sql, work)
    trend = trend_query(results[args.days]["wh"], sched.env_name(0))
    figs = figures(results, args.days, trend)
    goals = targets(figs)
    print_figures(figs, goals)
    record |= {
        "figures": figs,
        "targets": goals,
        "trend_query": trend,
        "measured": {
            str(d): {k: v for k, v in r.items() if k not in ("wh", "lake_dir")}
            for d, r in results.items()
        },  # fmt: skip
        "load_after": _harness.load_average(),
    }
    for goal in goals:
        harness.figure(goal["name"], goal["measured"], goal["unit"], goal["limit"])
    for name in ("rebuild_cpu_s", "rederive_wall_s", "first_update_wall_s", "trend_points"):
        unit = "points" if name == "trend_points" else "CPU-s" if "cpu" in name else "s"
        harness.figure(name, figs[name], unit)
    harness.write(json_path, record)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
