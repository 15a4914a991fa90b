"""The per-key models' cost against a plain scan of the same rows (issue 37: within 3x).

    .venv/bin/python bench/keyspace_models.py [--rows 8000000] [--keys-per-scan 200000]
        [--top-keys 10] [--rounds 3] [--sizes classes|continuous] [--root /work/bench-tmp]
        [--json out.json]

Builds a synthetic warehouse in a DuckDB file: `raw.raw_keyspace_keys` with --rows per-key rows
(the lake's `keyspace_keys` columns, tasks/keyspace.py: prefixes, types, encodings and sizes
shaped like tests/lakes/schedule.py's key space, MEMORY USAGE in allocator-like size classes as a
server answers, so with many ties (`--sizes continuous`: every key nearly its own size, the
worst case), a few keys without MEMORY USAGE or element count, encodings read for one key in
16 after the first 4096), one
`raw_keyspace_scans` row per scan of --keys-per-scan keys (10 environments, one scan a night),
and `batch_runs`: every scan, as in a full rebuild. Then runs the real dbt models on it
(`dbt run --select +<model>` for every model whose SQL reads `stg_keyspace_keys`, found in
sql/models/: a new per-key model is measured without editing this file) and takes each one's
compiled SQL from dbt's target/. Each model's SQL, and a plain scan (every column those models
read, decoded once: `sum(length(key))`, `sum(elements)`, ...), runs in a fresh child process
(`create temp table ... as <sql>`, the warehouse's DuckDB settings: threads, memory bound),
--rounds times, interleaved; per query the child reports its CPU seconds (time.process_time:
every DuckDB thread) and peak RSS (VmHWM, reset just before the query). Printed: the median
CPU-s, the peak memory, and the ratio model / scan, with the 3x target. JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Bench, copy_sql, load_line  # noqa: E402

# Issue 37: each per-key model costs at most this many plain scans of its rows.
TARGET_RATIO = 3.0
PER_KEY_RELATION = "stg_keyspace_keys"
# Key-space prefixes as tests/lakes/schedule.py draws them: (prefix, share, type, encoding,
# typical elements, bytes per element).
PREFIXES = [
    ("user:", 0.30, "hash", "listpack", 8, 22.0),
    ("session:", 0.20, "string", "embstr", 40, 2.2),
    ("cart:", 0.08, "hash", "listpack", 5, 30.0),
    ("product:", 0.06, "hash", "hashtable", 200, 45.0),
    ("feed:", 0.05, "list", "quicklist", 50, 50.0),
    ("rank:", 0.01, "zset", "skiplist", 500, 80.0),
    ("rate:", 0.12, "string", "int", 1, 56.0),
    ("lock:", 0.03, "string", "embstr", 36, 2.2),
    ("tags:", 0.06, "set", "listpack", 12, 16.0),
    ("queue:", 0.02, "list", "listpack", 20, 30.0),
    ("cache:", 0.06, "string", "raw", 2000, 1.2),
    ("", 0.01, "string", "embstr", 10, 5.0),
]
ENCODING_EVERY = 16
ENVIRONMENTS = 10


def per_key_models(project: Path) -> list[str]:
    """The models that read per-key rows (their SQL names stg_keyspace_keys), but the view."""
    found = []
    for path in sorted((project / "models").rglob("*.sql")):
        if path.stem != PER_KEY_RELATION and PER_KEY_RELATION in path.read_text():
            found.append(path.stem)
    return found


def scan_sql(database: str) -> str:
    """The plain scan: every column the per-key models read, each decoded once."""
    return (
        "select count(*) as n, sum(length(run_id)) as run_ids, sum(length(env)) as envs, "
        "sum(length(key)) as keys, sum(length(prefix)) as prefixes, "
        "sum(length(type)) as types, sum(length(encoding)) as encodings, "
        "sum(elements) as elements, sum(memory_usage_bytes) as bytes "
        f'from "{database}"."staging"."{PER_KEY_RELATION}"'
    )


# The sort-based definitions the aggregates replaced (before issue 37): on the same keys, with
# their many ties and unknown sizes, the marts dbt built must hold exactly these rows.
REFERENCE = {
    "keyspace_top_keys": """
        with ranked as (
            select k.*, s.top_keys,
                row_number() over (partition by k.run_id, k.env
                    order by k.memory_usage_bytes desc nulls last, k.key) as rank_bytes,
                row_number() over (partition by k.run_id, k.env
                    order by case when k.type <> 'string' then k.elements end desc nulls last,
                    k.key) as rank_elements,
            from {keys} as k
            join {scans} as s on s.run_id = k.run_id and s.env = k.env
        )
        select run_id, env, 'bytes' as ranked_by, rank_bytes as rank, key, prefix, type,
               encoding, elements, memory_usage_bytes,
        from ranked where rank_bytes <= top_keys
        union all
        select run_id, env, 'elements', rank_elements, key, prefix, type, encoding, elements,
               memory_usage_bytes,
        from ranked
        where rank_elements <= top_keys and type <> 'string' and elements is not null
    """,
    "keyspace_types": """
        select run_id, env, type, count(*) as keys, sum(elements) as elements,
            count(elements) as elements_read,
            sum(memory_usage_bytes) as memory_usage_bytes, avg(memory_usage_bytes) as mean_bytes,
            -- only among keys whose element count was read (none: no key named)
            first(key order by elements desc, key) filter (elements is not null)
                as biggest_by_elements,
            max(elements) as max_elements,
            first(key order by memory_usage_bytes desc nulls last, key) as biggest_by_bytes,
            max(memory_usage_bytes) as max_bytes,
        from {keys}
        group by run_id, env, type
    """,
    # The per-prefix sizes (the median was an exact holistic median of every key's size).
    "keyspace_prefixes": """
        select run_id, env, prefix, count(*) as keys_sampled,
            round(avg(memory_usage_bytes), 6) as mean_bytes,
            median(memory_usage_bytes) as median_bytes,
            max(memory_usage_bytes) as max_bytes,
            coalesce(sum(memory_usage_bytes), 0) as total_bytes,
            max(elements) filter (type <> 'string') as max_elements,
        from {keys}
        group by run_id, env, prefix
    """,
}
# The mart's columns each reference holds (all of them where not named).
REFERENCE_COLUMNS = {
    "keyspace_prefixes": "run_id, env, prefix, keys_sampled, round(mean_bytes, 6) as mean_bytes, "
    "median_bytes, max_bytes, total_bytes, max_elements"
}


def reference_check(path: Path) -> dict[str, dict]:
    """Each mart dbt built against its sort-based definition: rows in one and not the other."""
    import duckdb

    db = path.stem
    keys = f'"{db}"."staging"."{PER_KEY_RELATION}"'
    scans = f'"{db}"."staging"."stg_keyspace_scans"'
    con = duckdb.connect(str(path), read_only=True)
    out = {}
    for model, sql in REFERENCE.items():
        ref = sql.format(keys=keys, scans=scans)
        columns = REFERENCE_COLUMNS.get(model, "*")
        built = f'select {columns} from "{db}"."marts"."{model}"'
        extra = con.execute(
            f"select count(*) from ({built} except all (select * from ({ref})))"
        ).fetchone()[0]
        lacking = con.execute(
            f"select count(*) from (select * from ({ref}) except all {built})"
        ).fetchone()[0]
        rows = con.execute(f"select count(*) from ({built})").fetchone()[0]
        out[model] = {"rows": rows, "not_in_reference": extra, "missing": lacking,
                      "equal": extra == 0 and lacking == 0}  # fmt: skip
    con.close()
    return out


def size_sql(sizes: str) -> str:
    """Each key's MEMORY USAGE from its elements `n` and bytes per element `per`: rounded up
    to allocator-like size classes (four per doubling), as a real server answers (the real
    run's 2,000 keys have 2 to 5 distinct sizes per prefix), or `continuous` (+-1 %: nearly
    every key its own size, the worst case for anything keyed by size)."""
    raw = "round((56 + n * per) * (0.99 + 0.02 * drift))"
    if sizes == "continuous":
        return f"{raw}::bigint"
    step = f"pow(2, floor(log2({raw} - 1)) - 2)"
    return f"(case when {raw} <= 16 then 16 else ceil({raw} / {step}) * {step} end)::bigint"


def build_lake_tables(
    con, rows: int, keys_per_scan: int, top_keys: int, sizes: str = "classes"
) -> int:
    """raw.raw_keyspace_keys, raw_keyspace_scans, raw_keyspace_commandstats and batch_runs of
    `rows` synthetic keys; the number of scans."""
    import pyarrow as pa

    from yardstick.storage.schemas import file_schema

    scans = max(1, -(-rows // keys_per_scan))
    con.execute("create schema if not exists raw")
    shares = [p[1] for p in PREFIXES]
    bounds = [sum(shares[: i + 1]) / sum(shares) for i in range(len(PREFIXES))]
    con.execute(
        "create or replace temp table prefixes (idx int, upper double, prefix varchar, "
        "shown varchar, type varchar, encoding varchar, typical double, per double)"
    )
    con.executemany(
        "insert into prefixes values (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (i, bounds[i], p[0], f"{p[0]}*" if p[0] else "(no prefix)", p[2], p[3], p[4], p[5])
            for i, p in enumerate(PREFIXES)
        ],
    )
    # A scan is a night of one environment; each night renews 1 % of the keys.
    size_sql_ = size_sql(sizes)
    con.execute(
        f"""
        create or replace table raw.raw_keyspace_keys as
        with ids as (
            select
                i // {keys_per_scan} as scan,
                i % {keys_per_scan} as position,
                (i % {keys_per_scan}) + (i // {keys_per_scan} // {ENVIRONMENTS})
                    * {max(1, keys_per_scan // 100)} as id,
            from range({rows}) as r(i)
        ),
        drawn as (
            select *, (hash(id, scan % {ENVIRONMENTS}) % 1000000) / 1e6 as u,
                   (hash(id, 'spread') % 1000) / 1000.0 as spread,
                   (hash(id, scan) % 1000) / 1000.0 as drift,
            from ids
        ),
        typed as (
            select d.*, p.*,
                   greatest(1, round(p.typical * exp((d.spread - 0.5) * 2)))::bigint as n,
            from drawn as d
            asof join prefixes as p on d.u < p.upper
        )
        select
            '2025' || strftime(date '2025-01-01' + (scan // {ENVIRONMENTS})::int, '%m%d')
                || 'T020000Z-n' || (scan // {ENVIRONMENTS})::varchar as run_id,
            1::smallint as schema_version,
            prefix || id::varchar as key,
            shown as prefix,
            type,
            case when position < 4096 or position % {ENCODING_EVERY} = 0 then encoding end
                as encoding,
            case when position % 97 <> 5 then n end as elements,
            case when position % 997 <> 3 then {size_sql_} end as memory_usage_bytes,
            'env-' || lpad((scan % {ENVIRONMENTS})::varchar, 2, '0') as env,
            (date '2025-01-01' + (scan // {ENVIRONMENTS})::int)::date as date,
        from typed
        """
    )
    pairs = con.execute(
        "select distinct env, run_id from raw.raw_keyspace_keys order by run_id, env"
    ).fetchall()
    con.execute("create or replace table raw.batch_runs (env varchar, run_id varchar)")
    con.executemany("insert into raw.batch_runs values (?, ?)", pairs)
    schema = file_schema("keyspace_scans")
    scan_rows = [
        {
            "run_id": run_id,
            "schema_version": 1,
            "wall_s": 60.0,
            "stop_reason": "complete",
            "max_keys": keys_per_scan,
            "busy_share_cap": 0.05,
            "top_keys": top_keys,
            "projection_factor": 2.0,
            "db": 0,
            "dbsize_before": keys_per_scan,
            "dbsize_after": keys_per_scan,
            "used_memory_before_bytes": keys_per_scan * 400,
            "used_memory_after_bytes": keys_per_scan * 400,
            "scan_cpu_start_s": 100.0,
            "scan_cpu_end_s": 103.0,
            "baseline_cpu_share": 0.01,
            "encoding_every": ENCODING_EVERY,
        }
        for _env, run_id in pairs
    ]
    scans_table = pa.Table.from_pylist(scan_rows, schema=schema)
    scans_table = scans_table.append_column("env", pa.array([e for e, _ in pairs], pa.string()))
    con.register("scans_arrow", scans_table)
    con.execute(
        "create or replace table raw.raw_keyspace_scans as "
        "select *, strptime(left(run_id, 8), '%Y%m%d')::date as date from scans_arrow"
    )
    con.unregister("scans_arrow")
    empty = file_schema("keyspace_commandstats").empty_table()  # noqa: F841 - DuckDB reads it
    con.execute(
        "create or replace table raw.raw_keyspace_commandstats as "
        "select *, null::varchar as env, null::date as date from empty"
    )
    return scans


def build(
    work: Path, rows: int, keys_per_scan: int, top_keys: int, sizes: str
) -> tuple[Path, dict]:
    """The synthetic warehouse, built by the real dbt models: its path and each per-key
    model's compiled SQL (plus the plain scan's)."""
    import duckdb

    from yardstick.storage import dbt

    sql = copy_sql(work)
    dbt.project_dir = lambda: sql  # the copy taken at the bench's start
    path = work / "keyspace.duckdb"
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    con = duckdb.connect(str(path), config=dbt.duckdb_settings())
    scans = build_lake_tables(con, rows, keys_per_scan, top_keys, sizes)
    con.close()
    print(f"{rows:,} keys in {scans} scans landed in {time.perf_counter() - start:.1f} s")
    models = per_key_models(sql)
    start = time.perf_counter()
    dbt.run(path, ["run", "--select", *[f"+{m}" for m in models]], project=sql)
    print(f"dbt run of {', '.join(models)} and their parents: {time.perf_counter() - start:.1f} s")
    compiled = {}
    state = dbt.state_dir(path)
    for model in models:
        found = sorted(state.rglob(f"compiled/**/{model}.sql"))
        if not found:
            raise SystemExit(f"no compiled SQL of {model} under {state}")
        compiled[model] = found[0].read_text()
    return path, {"scan": scan_sql(path.stem), **compiled}


def _rss_hwm_bytes() -> int:
    """This process's peak resident set (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rss_bytes() -> int:
    """This process's resident set now (VmRSS), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def child(path: Path, sql_file: Path) -> None:
    """Run one query on the warehouse and print its CPU seconds and peak memory as JSON."""
    import duckdb

    from yardstick.storage import dbt

    sql = sql_file.read_text()
    con = duckdb.connect(str(path), config=dbt.duckdb_settings())
    con.execute("select 1").fetchall()
    rss_before = _rss_bytes()
    try:  # the peak from here on, not the import's or the connection's
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    cpu, wall = time.process_time(), time.perf_counter()
    con.execute(f"create temp table result as {sql}")
    cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - wall
    peak = _rss_hwm_bytes()
    result_rows = con.execute("select count(*) from result").fetchone()[0]
    con.close()
    print(
        json.dumps(
            {
                "cpu_s": cpu_s,
                "wall_s": wall_s,
                "peak_rss_bytes": peak,
                "rss_before_bytes": rss_before,
                "result_rows": result_rows,
            }
        )
    )


def measure(path: Path, name: str, sql: str, work: Path) -> dict:
    """One query in a fresh child process: its figures."""
    sql_file = work / f"{re.sub(r'[^a-z_]+', '_', name)}.sql"
    sql_file.write_text(sql)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(path), str(sql_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the query failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    """Median CPU and wall over the repetitions, the highest peak."""
    return {
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs),
        "peak_growth_bytes": max(r["peak_rss_bytes"] - r["rss_before_bytes"] for r in runs),
        "result_rows": runs[-1]["result_rows"],
        "cpu_s_each": [round(r["cpu_s"], 4) for r in runs],
    }


def run(args: argparse.Namespace) -> dict:
    """Build, measure every query interleaved, and return the record."""
    from _harness import interleaved

    work = args.root / f"keyspace-models-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # dbt's state (parse cache, lock) in the work folder: never shared with other processes.
    os.environ["YARDSTICK_DBT_STATE"] = str(work / "dbt-state")
    try:
        path, queries = build(work, args.rows, args.keys_per_scan, args.top_keys, args.sizes)

        def once(name: str):
            """A variant for interleaved(): one child run, kept."""

            def go() -> float:
                runs[name].append(measure(path, name, queries[name], work))
                return runs[name][-1]["cpu_s"]

            return go

        if args.before:
            # The sort-based SQL the aggregates replaced, timed beside them (same run).
            db = path.stem
            keys, scans = (
                f'"{db}"."staging"."{t}"' for t in (PER_KEY_RELATION, "stg_keyspace_scans")
            )
            for model, sql in REFERENCE.items():
                queries[f"{model} (before)"] = sql.format(keys=keys, scans=scans)
        runs: dict[str, list[dict]] = {name: [] for name in queries}
        reference = reference_check(path)
        for model, check in reference.items():
            print(f"{model}: {'equal to' if check['equal'] else 'DIFFERS from'} its sort-based "
                  f"definition ({check['rows']} rows)")  # fmt: skip
        interleaved({name: once(name) for name in queries}, args.rounds)
        figures = {name: summary(found) for name, found in runs.items()}
        scan_cpu_s = figures["scan"]["cpu_s"]
        for name, fig in figures.items():
            fig["ratio_to_scan"] = fig["cpu_s"] / scan_cpu_s if scan_cpu_s > 0 else None
            if name != "scan" and not name.endswith("(before)"):
                fig["within_target"] = (
                    fig["ratio_to_scan"] is not None and fig["ratio_to_scan"] <= TARGET_RATIO
                )
        return {
            "rows": args.rows,
            "keys_per_scan": args.keys_per_scan,
            "top_keys": args.top_keys,
            "sizes": args.sizes,
            "rounds": args.rounds,
            "target_ratio": TARGET_RATIO,
            "how": "the real dbt models run on a synthetic warehouse; each model's compiled SQL "
            "and a plain scan timed in fresh child processes",
            "queries": {name: _one_line(sql) for name, sql in queries.items()},
            "figures": figures,
            "reference": reference,
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _one_line(sql: str) -> str:
    """SQL as one line (comments dropped), for the JSON."""
    sql = re.sub(r"/\*.*?\*/", " ", sql, flags=re.DOTALL)
    return " ".join(sql.split())


def table(record: dict) -> str:
    """The figures as a markdown table."""
    lines = [
        "| query | CPU-s (median) | peak RSS MiB | ratio to scan | within 3x |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name, fig in record["figures"].items():
        ok = {True: "yes", False: "**no**", None: ""}[fig.get("within_target")]
        ratio = fig["ratio_to_scan"]
        lines.append(
            f"| {name} | {fig['cpu_s']:.3f} | {fig['peak_rss_bytes'] / 2**20:.0f} | "
            f"{ratio:.2f} | {ok} |"
            if ratio is not None
            else f"| {name} | {fig['cpu_s']:.3f} | {fig['peak_rss_bytes'] / 2**20:.0f} | - | |"
        )
    return "\n".join(lines)


def main() -> None:
    """Measure and print; --json writes the record."""
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    harness = Bench("keyspace_models", __doc__, rounds=3, tiny="3,000 rows, 300 keys a scan")
    parser = harness.parser
    parser.add_argument("--rows", type=int, default=8_000_000, help="per-key rows in all")
    parser.add_argument("--keys-per-scan", type=int, default=200_000)
    parser.add_argument("--top-keys", type=int, default=10, help="keyspace_scans.top_keys")
    parser.add_argument(
        "--before",
        action="store_true",
        help="also time the sort-based SQL the aggregates replaced",
    )
    parser.add_argument(
        "--sizes",
        choices=("classes", "continuous"),
        default="classes",
        help="MEMORY USAGE in size classes (as servers answer) or continuous (worst case)",
    )
    parser.add_argument("--root", type=Path, default=Path("/work/bench-tmp"))
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = harness.parse()
    if args.tiny:
        args.rows, args.keys_per_scan, args.top_keys, args.rounds = 3000, 300, 5, 1
    for name in ("rows", "keys_per_scan", "top_keys"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    record = run(args)
    print(table(record))
    print(f"load {load_line()}")
    for name, fig in record["figures"].items():
        harness.figure(f"{name}/cpu_s", fig["cpu_s"], "CPU-s")
        target = None if name == "scan" or name.endswith("(before)") else TARGET_RATIO
        harness.figure(f"{name}/ratio_to_scan", fig["ratio_to_scan"], "ratio", target)
    harness.write(args.json, record)


if __name__ == "__main__":
    main()
