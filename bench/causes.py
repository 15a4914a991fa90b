"""Likely causes, measured: synthetic histories with a planted step and a planted cause, landed
in the real lake format and ranked by the real model (marts.change_causes, the causes_* dbt
vars of yardstick/sql/dbt_project.yml) in a real warehouse build.

    .venv/bin/python bench/causes.py [--replicates 20] [--seed 7] [--root DIR] [--json out.json]
        [--tiny]

Each scenario is `--replicates` environments of NIGHTS nights, pipeline_speedup σ = 1 % falling
20 % on night STEP, and beside it the background the model reads, noisy every night: calls/s
of SET and GET (σ 5 %), their usec_per_call (σ 3 %), used_memory (σ 2 %), the host's run
queue during the throughput family (8 samples of about 1.2 threads, σ 0.6, on 2 cores), the
tool's own SLOWLOG entry (to be left out).
Planted on the step's night and after:
- config: appendfsync everysec → always (the fingerprint);
- slowlog: an application client's slow KEYS each night (SLOWLOG);
- usec: GET's usec_per_call 50 % higher (commandstats);
- memory: used_memory 40 % higher (INFO);
- evictions: 20,000 keys evicted a night where none were (INFO stats);
- failover: the Sentinels name another master (a topology change);
- load: 4 more threads in the host's run queue during the family (a CPU hog, 2 per core);
- two: appendfsync and the slow KEYS at once (the first must be appendfsync, the slow command
  named too among the readers' causes_top);
- alone: nothing (the step is the figure's own);
- steady: no step and nothing.
And a sweep, outside the target: GET's usec_per_call +5 %, +10 %, +20 % (σ 3 %): the share
named likely at all, i.e. how small a cause the rule still names.
Reported: per planted scenario, the share of its judged changes whose first cause is the
planted one (target >= 90 % overall); for alone, the share naming any likely cause (target 0);
for steady, the share with any cause row at all (target 0); for two, the share naming both.
Small check: --tiny (1 replicate).
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
from lakes import (  # noqa: E402
    benchmark,
    cell,
    family_load,
    fingerprint,
    new_run,
    runs_row,
    slowlog_collection,
    steps,
)
from test_history import NIGHTLY, START  # noqa: E402

from yardstick.storage import delta, warehouse  # noqa: E402
from yardstick.storage.lakefs import Lake  # noqa: E402

NIGHTS, STEP = 24, 18
FIGURE, SUBJECT = "pipeline_speedup", "set c1 3B"


@dataclass(frozen=True)
class Scenario:
    """One story: whether the figure steps, the candidate planted beside it (None: none) and
    what is planted (by default the candidate itself); `sweep`: outside the target."""

    name: str
    step: bool
    planted: str | None
    plants: frozenset[str] = frozenset()
    usec_factor: float = 1.5
    sweep: bool = False

    def has(self, what: str) -> bool:
        """Whether `what` is planted in this story."""
        return what in self.plants or what == self.planted


SLOW = "slowlog keys (2 args)"
SCENARIOS = (
    Scenario("config", True, "appendfsync"),
    Scenario("slowlog", True, SLOW),
    Scenario("usec", True, "get usec_per_call"),
    Scenario("memory", True, "used_memory"),
    Scenario("evictions", True, "evicted keys/s"),
    Scenario("failover", True, "topology"),
    Scenario("load", True, "host load per core"),
    Scenario("two", True, "appendfsync", frozenset({SLOW})),
    Scenario("alone", True, None),
    Scenario("steady", False, None),
    *(
        Scenario(f"usec+{pct}%", True, "get usec_per_call", usec_factor=1 + pct / 100, sweep=True)
        for pct in (5, 10, 20)
    ),
)


def night_facts(sc: Scenario, day: int, rng: random.Random) -> dict[tuple[str, str], str]:
    """The fingerprint's facts of one night: appendfsync, used_memory, evictions, the master
    the Sentinels name."""
    after = day >= STEP
    memory = 1e8 * (1.4 if after and sc.has("used_memory") else 1.0)
    evicting = after and sc.has("evicted keys/s")
    return {
        ("config", "appendfsync"): "always" if after and sc.has("appendfsync") else "everysec",
        ("memory", "used_memory"): str(round(memory * (1 + rng.gauss(0, 0.02)))),
        ("server", "run_id"): "srv-a",
        ("server", "uptime_in_seconds"): str(1000 + day * 86400),
        ("stats", "evicted_keys"): str(20000 * (day - STEP + 1) if evicting else 0),
        ("topology", "sentinel_master_address"): (
            "10.0.0.2:6379" if after and sc.has("topology") else "10.0.0.1:6379"
        ),
    }


def host_load(run, sc: Scenario, day: int, rng: random.Random) -> None:
    """Eight load samples through the throughput family: other work's threads about 1.2
    (σ 0.6, whole threads), 4 more with a CPU hog planted (2 per core)."""
    hog = 4 if day >= STEP and sc.has("host load per core") else 0
    queues = [max(round(rng.gauss(1.2, 0.6)), 0) + hog for _ in range(8)]
    family_load(run, "throughput", queues)


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
        fingerprint(run, facts=night_facts(sc, day, rng))
        host_load(run, sc, day, rng)
        level = (8.0 if after and sc.step else 10.0) * (1 + rng.gauss(0, 0.01))
        benchmark(run, [cell("SET", 1, p, v) for p, v in ((1, 1e5), (16, 1e5 * level))])
        rows = []
        for command, rate in (("set", 100.0), ("get", 200.0)):
            n = rate * 86400 * (1 + rng.gauss(0, 0.05))
            planted = after and sc.has("get usec_per_call") and command == "get"
            cost = 3.0 * (sc.usec_factor if planted else 1.0)
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
        ids = [slow_id + 1] + ([slow_id + 2] if after and sc.has(SLOW) else [])
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
        found = rank_firsts(root, replicates, rng)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report(harness, args, found, replicates)


def rank_firsts(root: Path, replicates: int, rng: random.Random) -> dict[str, list[tuple]]:
    """Land every scenario, build once: each environment's causes (kind, candidate, likely)
    of its pipelining change, first first."""
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
            " where figure = ? and subject = ? order by env, cause_rank",
            [FIGURE, SUBJECT],
        ).fetchall()
    finally:
        con.close()
    found: dict[str, list[tuple]] = {}
    for env, kind, candidate, likely in rows:
        found.setdefault(env, []).append((kind, candidate, likely))
    return found


def report(harness: Bench, args, found: dict[str, list[tuple]], replicates: int) -> None:
    """Print the table and the targets; record the figures."""
    figures: dict[str, dict] = {}
    planted_hits = planted_n = 0
    top = 3  # the readers' causes_top
    print("| scenario | series | judged | first cause right / named (sweep: named at all) |")
    print("| --- | --- | --- | --- |")
    for sc in SCENARIOS:
        envs = [f"{sc.name}-{i}" for i in range(replicates)]
        judged = [e for e in envs if e in found]
        if sc.sweep:  # named likely anywhere
            share = sum(
                any(c == sc.planted and likely for _k, c, likely in found[e]) for e in judged
            ) / len(envs)
        elif sc.planted:
            right = sum(found[e][0][1] == sc.planted and found[e][0][2] for e in judged)
            planted_hits += right
            planted_n += len(envs)  # a step not judged counts as missed
            share = right / len(envs)
        else:
            share = sum(found[e][0][2] for e in judged) / len(envs)  # a cause named wrongly
        figures[sc.name] = {"series": len(envs), "judged": len(judged), "share": share}
        if sc.plants:
            both = sum(
                all(any(c == p and likely for _k, c, likely in found[e][:top]) for p in sc.plants)
                for e in judged
            ) / len(envs)
            figures[sc.name]["also_named"] = both
            harness.figure(f"{sc.name}/also_named", both, "share")
        print(f"| {sc.name} | {len(envs)} | {len(judged)} | {share:.0%} |")
        harness.figure(f"{sc.name}/share", share, "share")
    overall = planted_hits / planted_n if planted_n else None
    harness.figure("planted_ranked_first", overall, "share", target=0.9, better="higher")
    harness.figure("alone_cause_named", figures["alone"]["share"], "share", target=0.0)
    steady_named = sum(f"steady-{i}" in found for i in range(replicates)) / replicates
    harness.figure("steady_any_cause_row", steady_named, "share", target=0.0)
    print(f"planted cause ranked first: {overall:.0%} (target >= 90 %)")
    print(f"two at once, the second named too: {figures['two']['also_named']:.0%}")
    print(f"step alone, a cause named: {figures['alone']['share']:.0%} (target 0)")
    print(f"steady, any cause row: {steady_named:.0%} (target 0)")
    harness.write(
        args.json, {"settings": {"replicates": replicates, "tiny": args.tiny}, "scenarios": figures}
    )


if __name__ == "__main__":
    main()
