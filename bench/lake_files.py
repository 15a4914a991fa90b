"""The lake's files at the worst moment of a steady day, today's compaction against the
collection's small-file pass: measured on a small real lake, then extrapolated to 50
environments x 365 days by the formulas below (both printed; JSON with --json).

    .venv/bin/python bench/lake_files.py [--envs 3] [--rounds 26] [--round-s 4]
        [--target-envs 50] [--target-days 365] [--detail-days 30] [--json PATH] [--tiny]

Both schemes land the same real-shaped environments (tests/lakes/schedule.py: a nightly run, then
collection rounds, each round one commit per table for every environment, delta.batch as
flows/collect.py lands them) on a lake of their own, and run after each round the collection
flow's compaction call: today's (`min_files=25`, the month's file merged, replaced files kept
an hour), and the change's (`min_files=3`, files below compaction.SMALL_FILE_BYTES only,
replaced files deleted once no version of the readers' margin names them). Rounds are paced
`--round-s` apart and the margin is scaled with them (10 minutes = 2 rounds of 5 minutes), so
the small lake's on-disk peak is the real mechanism's, time-compressed. Every file on disk is
counted: data files the current versions name, replaced or orphan ones, `_delta_log` files.
Not compressed: the log's 30-minute retention (the small lake keeps every commit of the run:
conservative) and the rounds that overrun `--round-s` on a loaded machine (counted, printed).

Extrapolation (per environment, measured here; E environments, M months of 31 days, K =
COMPACT_AFTER_FILES, P = floor(margin / (5 K minutes)) + 1 passes' replaced files kept):
    base   = E * (month_files * M + detail_files * detail_days)
    today  = base + E * (24 f + (25 f + p) + n_other) + a day of log
             (24 rounds pending, the last pass's replaced files waiting 2 hours for the next
             pass's vacuum, the nightly pass's replaced files of the nightly tables waiting a
             day for the next nightly vacuum)
    change = max(daytime: base + E * (p + (K-1) f) + P * E * (K f + p) + 30 minutes of log,
                 after the nightly pass: base + E * (n + p + (K-1) f) + P * E * (K f + p)
                 + 30 minutes of log + the nightly run's commits)
f: data files a collection lands per environment, p: collection partitions per environment
(one day file each), n: files the nightly pass replaces per environment (n_other: of the
tables the collection does not land). The small lake's own moments, scaled to E (data files
beyond yesterday's x E / envs, its log as measured: a conservative 26 rounds of it), are
printed beside."""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Bench  # noqa: E402
from lakes import schedule as sched  # noqa: E402

from yardstick.flows.collect import COLLECT_TABLES, COMPACT_AFTER_FILES  # noqa: E402
from yardstick.storage import compaction, delta  # noqa: E402
from yardstick.storage.lakefs import Lake  # noqa: E402
from yardstick.storage.schemas import DETAIL_TABLES  # noqa: E402

TODAY_MIN_FILES = 25  # the collection flow's threshold before this change
ROUND_MIN = 5  # the collection schedule
PASS_MIN = ROUND_MIN * COMPACT_AFTER_FILES
TARGET = 30_000
DAY = sched.TONIGHT - timedelta(days=10)  # mid-month: every table's month file exists


def split_runs(data: pa.Table) -> dict[str, pa.Table]:
    """A table sorted by run id as run id -> its rows, without run_id and schema_version."""
    body = data.drop_columns(["run_id", "schema_version"])
    ids = data["run_id"].to_pylist()
    out, start = {}, 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[start]:
            out[ids[start]] = body.slice(start, i - start)
            start = i
    return out


def env_day(index: int, per_day: int, keys: int) -> dict[str, dict[str, pa.Table]]:
    """One environment's day as run id -> table -> rows (detail tables included)."""
    merged, detail = sched.day_tables(index, [DAY], per_day, keys, detail_for=frozenset([DAY]))
    runs: dict[str, dict[str, pa.Table]] = {}
    for table, data in merged.items():
        for run_id, rows in split_runs(data).items():
            runs.setdefault(run_id, {})[table] = rows
    for run_id, tables in detail.items():
        runs.setdefault(run_id, {}).update(tables)
    return runs


def files_on_disk(lake_dir: Path) -> dict[str, int]:
    """Every file of the lake: data files a current version names, replaced (or orphan) data
    files (of the collection's tables apart), and `_delta_log` files."""
    data = log = 0
    data_collect = 0
    for path in lake_dir.rglob("*"):
        if not path.is_file() or path.name.startswith("."):
            continue
        if "_delta_log" in path.parts:
            log += 1
            continue
        data += 1
        data_collect += path.relative_to(lake_dir).parts[0] in COLLECT_TABLES
    present = delta.tables_present(Lake.at(lake_dir))
    current = {t: len(delta.data_files(Lake.at(lake_dir), t)) for t in present}
    current_collect = sum(n for t, n in current.items() if t in COLLECT_TABLES)
    return {
        "total": data + log,
        "current": sum(current.values()),
        "replaced": data - sum(current.values()),
        "replaced_collect": data_collect - current_collect,
        "log": log,
    }


def land_nightly(lake_dir: Path, days: list[dict], run_id: str, as_id: str) -> None:
    """The nightly run of every environment, environment by environment, table by table."""
    for day in days:
        tables = day["runs"][run_id]
        for table in sorted(tables, key=lambda t: (t == "runs", t == "steps", t)):
            delta.write(Lake.at(lake_dir), table, day["env"], as_id, tables[table])


def land_round(lake_dir: Path, days: list[dict], run_id: str) -> None:
    """One collection of every environment: one commit per table (delta.batch)."""
    with delta.batch(Lake.at(lake_dir), f"collection {run_id}"):
        for day in days:
            for table, rows in day["runs"].get(run_id, {}).items():
                delta.write(Lake.at(lake_dir), table, day["env"], run_id, rows)


def collection_pass(scheme: str, lake_dir: Path, envs: list[str], margin_s: float):
    """The collection flow's compaction call, as before this change or as now."""
    if scheme == "today":
        return compaction.compact(
            Lake.at(lake_dir), min_files=TODAY_MIN_FILES, tables=COLLECT_TABLES, envs=envs
        )
    return compaction.compact(
        Lake.at(lake_dir),
        min_files=COMPACT_AFTER_FILES,
        tables=COLLECT_TABLES,
        envs=envs,
        small_bytes=compaction.SMALL_FILE_BYTES,
        reader_margin_s=margin_s,
    )


def simulate(scheme: str, days: list[dict], args: argparse.Namespace, root: Path) -> dict:
    """Yesterday compacted, tonight's nightly run and pass, then `rounds` paced collection
    rounds each followed by the scheme's collection pass; files counted at every step."""
    lake_dir = root / scheme
    envs = [d["env"] for d in days]
    e = len(envs)
    nightly = next(r for r in sorted(days[0]["runs"]) if "-n" in r)
    tonight = nightly.replace(f"{DAY:%Y%m%d}", f"{DAY + timedelta(days=1):%Y%m%d}")
    rounds = sorted(r for r in days[0]["runs"] if "-c" in r)[: args.rounds]
    land_nightly(lake_dir, days, nightly, nightly)
    compaction.compact(Lake.at(lake_dir), vacuum_hours=0)
    base = files_on_disk(lake_dir)
    present = delta.tables_present(Lake.at(lake_dir))
    detail = sum(len(delta.data_files(Lake.at(lake_dir), t)) for t in DETAIL_TABLES if t in present)
    land_nightly(lake_dir, days, nightly, tonight)
    before_night = files_on_disk(lake_dir)
    compaction.compact(Lake.at(lake_dir))
    night = files_on_disk(lake_dir)
    margin_s = compaction.READER_MARGIN_S / (ROUND_MIN * 60) * args.round_s
    peak, steps, cpu_s, previous, overruns = night, [], 0.0, night, 0
    for i, run_id in enumerate(rounds):
        started = time.monotonic()
        land_round(lake_dir, days, run_id)
        landed = files_on_disk(lake_dir)
        cpu = time.process_time()
        # The first pass of each hour sweeps every table (12 rounds an hour, time-compressed).
        compaction.SWEEP_ALL_WITHIN_MIN = 60 if i % (60 // ROUND_MIN) == 0 else 0
        report = collection_pass(scheme, lake_dir, envs, margin_s)
        cpu_s += time.process_time() - cpu
        passed = files_on_disk(lake_dir)
        steps.append(
            {
                "round": i + 1,
                "data_landed": landed["current"] - previous["current"],
                "log_landed": landed["log"] - previous["log"],
                "after_landing": landed,
                "after_pass": passed,
                "merged": report.files_in,
                "vacuumed": report.files_vacuumed,
            }
        )
        peak = max(peak, landed, passed, key=lambda c: c["total"])
        previous = passed
        spent_s = time.monotonic() - started
        overruns += spent_s > args.round_s  # the margin's scaling holds only when paced
        time.sleep(max(0.0, args.round_s - spent_s))
    landed_data = sorted(s["data_landed"] for s in steps)
    landed_log = sorted(s["log_landed"] for s in steps)
    collect_partitions = {
        (f.table, f.env)
        for t in COLLECT_TABLES
        if t in delta.tables_present(Lake.at(lake_dir))
        for f in delta.data_files(Lake.at(lake_dir), t)
    }
    return {
        "envs": e,
        "month_files_per_env": (base["current"] - detail) / e,
        "detail_files_per_env": detail / e,
        "nightly_replaced_per_env": (night["replaced"] - before_night["replaced"]) / e,
        "nightly_replaced_collect_per_env": (
            night["replaced_collect"] - before_night["replaced_collect"]
        )
        / e,
        "nightly_log_per_env": (before_night["log"] - base["log"]) / e,
        "data_files_per_env_round": landed_data[-1] / e if scheme == "today" else None,
        "log_files_per_round": landed_log[len(landed_log) // 2],
        "collect_partitions_per_env": len(collect_partitions) / e,
        "tables": len(delta.tables_present(Lake.at(lake_dir))),
        "base": base,
        "night": night,
        "small_lake_peak": peak,
        "rounds_overrun": overruns,
        "small_lake_final": previous,
        "pass_cpu_s": cpu_s,
        "steps": steps,
    }


def extrapolate(today: dict, change: dict, args: argparse.Namespace) -> dict:
    """The worst moment at `target_envs` x `target_days`, by the module docstring's formulas."""
    e, months = args.target_envs, math.ceil(args.target_days / 31) + 1
    f = today["data_files_per_env_round"]
    p = today["collect_partitions_per_env"]
    n_other = today["nightly_replaced_per_env"] - today["nightly_replaced_collect_per_env"]
    n_all = today["nightly_replaced_per_env"]
    base = e * (
        today["month_files_per_env"] * months + today["detail_files_per_env"] * args.detail_days
    )
    rounds_day = 24 * 60 // ROUND_MIN
    log_round = today["log_files_per_round"]
    # Today: a day of log (rounds, the nightly's commits, 12 passes a day, a checkpoint
    # every 50 commits).
    log_day = (rounds_day * log_round + e * today["nightly_log_per_env"] + 12 * log_round) * 1.02
    today_parts = {
        "base": base,
        "pending": e * (TODAY_MIN_FILES - 1) * f,
        "replaced_by_last_pass": e * (TODAY_MIN_FILES * f + p),
        "replaced_by_nightly": e * n_other,
        "log": log_day,
    }
    # The change: the day's file per partition, at most K-1 landings pending, the passes
    # whose replaced files the margin keeps (a pass's are deleted by the first pass at least
    # the margin later: floor(margin / interval) + 1 passes' worth at any moment), and the
    # log: 30 minutes of commits (6 rounds; 2 passes of an optimize and a vacuum's two
    # commits per table), up to 10 commits and 2 checkpoints per table before a cleanup.
    k = COMPACT_AFTER_FILES
    passes_kept = compaction.READER_MARGIN_S // (PASS_MIN * 60) + 1
    log_30min = 6 * log_round + 2 * 3 * log_round + change["tables"] * 12
    day_parts = {
        "base": base,
        "day_files": e * p,
        "pending": e * (k - 1) * f,
        "replaced_kept": passes_kept * e * (k * f + p),
        "log": log_30min,
    }
    # Right after the nightly pass: what it replaced (month and tonight's files, the day files
    # and pending landings it merged), the collection passes' of the margin, the nightly
    # run's commits besides.
    night_parts = {
        "base": base,
        "replaced_by_nightly": e * (n_all + p + (k - 1) * f),
        "replaced_kept": passes_kept * e * (k * f + p),
        "log": log_30min + e * today["nightly_log_per_env"],
    }
    worst = max(sum(day_parts.values()), sum(night_parts.values()))
    # The change measured: every moment of the small lake (after the nightly pass, after each
    # landing and each pass), its data files beyond yesterday's scaled by environments, the
    # base as above, the log as measured plus the other environments' nightly commits (all
    # inside the 2-hour log the run covers).
    small = change["base"]
    scale = e / change["envs"]
    moments = [change["night"]]
    for step in change["steps"]:
        moments += [step["after_landing"], step["after_pass"]]
    measured = max(
        base
        + (m["current"] - small["current"] + m["replaced"]) * scale
        + m["log"]
        + (e - change["envs"]) * change["nightly_log_per_env"]
        for m in moments
    )
    return {
        "target_envs": e,
        "target_days": args.target_days,
        "months": months,
        "today": {
            "files": round(sum(today_parts.values())),
            **{k: round(v) for k, v in today_parts.items()},
        },
        "change_daytime": {
            "files": round(sum(day_parts.values())),
            **{k: round(v) for k, v in day_parts.items()},
        },
        "change_after_nightly": {
            "files": round(sum(night_parts.values())),
            **{k: round(v) for k, v in night_parts.items()},
        },
        "change": round(worst),
        "change_measured_scaled": round(measured),
        "target": TARGET,
        "reader_margin_s": compaction.READER_MARGIN_S,
    }


def main(argv: list[str] | None = None) -> int:
    harness = Bench("lake_files", __doc__, rounds=26, tiny="1 environment, 4 rounds of 0.2 s")
    parser = harness.parser
    parser.add_argument("--envs", type=int, default=3)
    parser.add_argument("--round-s", type=float, default=4.0)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--target-envs", type=int, default=50)
    parser.add_argument("--target-days", type=int, default=365)
    parser.add_argument("--detail-days", type=int, default=30)
    parser.add_argument("--root", type=Path, default=None)
    args = harness.parse(argv)
    if args.tiny:
        args.envs, args.rounds, args.round_s, args.keys = 1, 4, 0.2, 200
    root = Path(tempfile.mkdtemp(prefix="lake-files-", dir=args.root))
    try:
        days = [
            {"env": sched.env_name(i), "runs": env_day(i, 24 * 60 // ROUND_MIN, args.keys)}
            for i in range(args.envs)
        ]
        today = simulate("today", days, args, root)
        change = simulate("change", days, args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    model = extrapolate(today, change, args)
    for name, run in (("today", today), ("change", change)):
        peak = run["small_lake_peak"]
        print(
            f"{name}: small lake ({run['envs']} environments, {args.rounds} rounds): peak "
            f"{peak['total']:,} files ({peak['current']:,} current, {peak['replaced']:,} replaced, "
            f"{peak['log']:,} log), collection passes {run['pass_cpu_s']:.2f} CPU-s, "
            f"{run['rounds_overrun']} rounds over --round-s"
        )
    for name in ("today", "change_daytime", "change_after_nightly"):
        parts = ", ".join(f"{k} {v:,}" for k, v in model[name].items() if k != "files")
        size = f"{model['target_envs']} x {model['target_days']}"
        print(f"{size} {name}: {model[name]['files']:,} files ({parts})")
    print(
        f"{model['target_envs']} x {model['target_days']} change, the small lake's moments "
        f"scaled: {model['change_measured_scaled']:,} files at the worst"
    )
    print(
        f"worst moment: today {model['today']['files']:,}, with the change "
        f"{model['change']:,} (target {TARGET:,})"
    )
    harness.figure("today_files", model["today"]["files"], "files", TARGET)
    harness.figure("change_files", model["change"], "files", TARGET)
    harness.figure("change_measured_scaled", model["change_measured_scaled"], "files", TARGET)
    for name, run in (("today", today), ("change", change)):
        harness.figure(f"{name}/pass_cpu_s", run["pass_cpu_s"], "CPU-s")
    harness.write(args.json, {"today": today, "change": change, "model": model})
    return 0


if __name__ == "__main__":
    sys.exit(main())
