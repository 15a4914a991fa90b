"""Likely causes, measured: synthetic histories with a planted step and a planted cause, landed
in the real lake format and ranked by the real model (marts.change_causes, the causes_* dbt
vars of yardstick/sql/dbt_project.yml) in a real warehouse build.

    .venv/bin/python bench/causes.py [--replicates 20] [--seed 7] [--root DIR] [--json out.json]
        [--tiny]

Each scenario is `--replicates` environments of NIGHTS nights, pipeline_speedup σ = 1 % falling
20 % on night STEP, and beside it the background the model reads, noisy every night: calls/s
of SET and GET (σ 5 %), their usec_per_call (σ 3 %), used_memory (σ 2 %), the tool's own
SLOWLOG entry (to be left out). Planted on the step's night and after:
- config: appendfsync everysec → always (the fingerprint);
- slowlog: an application client's slow KEYS each night (SLOWLOG);
- usec: GET's usec_per_call 50 % higher (commandstats);
- memory: used_memory 40 % higher (INFO);
- alone: nothing (the step is the figure's own);
- steady: no step and nothing.
Reported: per planted scenario, the share of its judged changes whose first cause is the
planted one (target >= 90 % overall); for alone, the share naming any likely cause (target 0);
for steady, the share with any cause row at all (target 0). Small check: --tiny (1 replicate).
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Bench  # noqa: E402
from lakes import benchmark, cell, fingerprint, new_run, runs_row, slowlog_collection, steps  # noqa: E402
from test_history import NIGHTLY, START  # noqa: E402

from yardstick.storage import delta, warehouse  # noqa: E402
from yardstick.storage.lakefs import Lake  # noqa: E402

NIGHTS, STEP = 24, 18
FIGURE, SUBJECT = "pipeline_speedup", "set c1 3B"


@dataclass(frozen=True)
class Scenario:
    """One story: whether the figure steps, and the candidate planted beside it (None: none)."""

    name: str
    step: bool
    planted: str | None


SCENARIOS = (
    Scenario("config", True, "appendfsync"),
    Scenario("slowlog", True, "slowlog keys (2 args)"),
    Scenario("usec", True, "get usec_per_call"),
    Scenario("memory", True, "used_memory"),
    Scenario("alone", True, None),
    Scenario("steady", False, None),
)


def land_history(lake_dir: Path, sc: Scenario, env: str, rng: random.Random) -> None:
    """NIGHTS nights of one environment of scenario `sc`."""
    calls = {"set": 0.0, "get": 0.0}
    usec = {"set": 0.0, "get": 0.0}
    slow_id = 0
    for day in range(NIGHTS):
        after = day >= STEP
        run = new_run(lake_dir, env, START + timedelta(days=day))
        steps(run, {"throughput": NIGHTLY})
        runs_row(run, "nightly", finished_at=run.at, url="redis://x:1/0")
        memory = 1e8 * (1.4 if after and sc.planted == "used_memory" else 1.0)
        fsync = "always" if after and sc.planted == "appendfsync" else "everysec"
        fingerprint(
            run,
            facts={
                ("config", "appendfsync"): fsync,
                ("memory", "used_memory"): str(round(memory * (1 + rng.gauss(0, 0.02)))),
            },
        )
        level = (8.0 if after and sc.step else 10.0) * (1 + rng.gauss(0, 0.01))
        benchmark(run, [cell("SET", 1, p, v) for p, v in ((1, 1e5), (16, 1e5 * level))])
        rows = []
        for command, rate in (("set", 100.0), ("get", 200.0)):
            n = rate * 86400 * (1 + rng.gauss(0, 0.05))
            cost = 3.0 * (
                1.5 if after and sc.planted == "get usec_per_call" and command == "get" else 1.0
            )
            calls[command] += round(n)
            usec[command] += round(n * cost * (1 + rng.gauss(0, 0.03)))
            rows.append(
                {
                    "server_run_id": "srv-a",
                    "uptime_s": 1000 + day * 86400,
                    "taken_at": run.at,
                    "command": command,
                    "calls": int(calls[command]),
                    "usec": int(usec[command]),
                    "rejected_calls": 0,
                    "failed_calls": 0,
                }
            )
        run.write("commandstats_snapshots", rows)
        # the tool's own entry (odd id) every night; the application's (even) when planted
        ids = [slow_id + 1] + (
            [slow_id + 2] if after and sc.planted and "slowlog" in sc.planted else []
        )
        slow_id += 2
        slowlog_collection(run, ids)


def main() -> None:
    """Land every scenario, build once, count what the model ranked first."""
    harness = Bench("causes", __doc__, rounds=None, tiny="1 replicate a scenario")
    harness.add_argument("--replicates", type=int, default=20)
    harness.add_argument("--seed", type=int, default=7)
    harness.add_argument("--root", type=Path, help="where its work folder goes (default: /tmp)")
    harness.add_argument("--keep", action="store_true", help="keep the lake and warehouse")
    args = harness.parse()
    replicates = 1 if args.tiny else args.replicates
    rng = random.Random(args.seed)
    if args.root:
        args.root.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-causes-", dir=args.root))
    try:
        first = rank_firsts(root, replicates, rng)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report(harness, args, first, replicates)


def rank_firsts(root: Path, replicates: int, rng: random.Random) -> dict[str, tuple]:
    """Land every scenario, build once: each environment's first cause (kind, candidate,
    likely) of its pipelining change."""
    lake_dir = root / "lake"
    with delta.batch(Lake.at(lake_dir), "bench causes"):
        for sc in SCENARIOS:
            for i in range(replicates):
                land_history(lake_dir, sc, f"{sc.name}-{i}", rng)
    warehouse.build(Lake.at(lake_dir), root / "w.duckdb")
    from yardstick.storage.warehouse import connect_read_only

    con = connect_read_only(root / "w.duckdb")
    try:
        rows = con.execute(
            "select env, kind, candidate, likely from marts.change_causes"
            " where figure = ? and subject = ? and cause_rank = 1",
            [FIGURE, SUBJECT],
        ).fetchall()
    finally:
        con.close()
    return {env: (kind, candidate, likely) for env, kind, candidate, likely in rows}


def report(harness: Bench, args, first: dict[str, tuple], replicates: int) -> None:
    """Print the table and the targets; record the figures."""
    figures: dict[str, dict] = {}
    planted_hits = planted_n = 0
    print("| scenario | series | judged | first cause right / named |")
    print("| --- | --- | --- | --- |")
    for sc in SCENARIOS:
        envs = [f"{sc.name}-{i}" for i in range(replicates)]
        judged = [e for e in envs if e in first]
        if sc.planted:
            right = sum(first[e][1] == sc.planted and first[e][2] for e in judged)
            planted_hits += right
            planted_n += len(envs)  # a step not judged counts as missed
            share = right / len(envs)
        else:
            share = sum(first[e][2] for e in judged) / len(envs)  # a cause named wrongly
        figures[sc.name] = {"series": len(envs), "judged": len(judged), "share": share}
        print(f"| {sc.name} | {len(envs)} | {len(judged)} | {share:.0%} |")
        harness.figure(f"{sc.name}/share", share, "share")
    overall = planted_hits / planted_n if planted_n else None
    harness.figure("planted_ranked_first", overall, "share", target=0.9, better="higher")
    harness.figure("alone_cause_named", figures["alone"]["share"], "share", target=0.0)
    steady_named = sum(f"steady-{i}" in first for i in range(replicates)) / replicates
    harness.figure("steady_any_cause_row", steady_named, "share", target=0.0)
    print(f"planted cause ranked first: {overall:.0%} (target >= 90 %)")
    print(f"step alone, a cause named: {figures['alone']['share']:.0%} (target 0)")
    print(f"steady, any cause row: {steady_named:.0%} (target 0)")
    harness.write(
        args.json, {"settings": {"replicates": replicates, "tiny": args.tiny}, "scenarios": figures}
    )


if __name__ == "__main__":
    main()
