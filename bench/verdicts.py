"""The nightly verdict's false alarms and misses, measured: synthetic series with known noise
and known events, landed in the real lake format, judged by the real models (figure_trends,
sql/macros/history.sql) in a real warehouse build.

    .venv/bin/python bench/verdicts.py [--replicates 4000] [--nights 40] [--seed 7]
        [--vars '{verdict_band_sigmas: 4}' ...] [--root /work/bench-tmp] [--keep]

Defaults: about 80 s on 2 cores (the warehouse build ~70 s; 2.6 M points); peak RSS 2.5 GB
measured at 5000 replicates; each --vars pass adds ~15 s. Small check: --replicates 10 (under 10 s).

Each scenario is `--replicates` independent series (subject "<scenario>#<replicate>") over
nights 0..N-1, the event (if any) at night 30:
- steady noise: Gaussian σ = 1 %, 2 %, 5 %; Student-t (3 d.f.) scaled to σ = 2 %; uniform ± 5 %;
- steps of 5, 10 and 20 % (pipeline_speedup falls: worse) in Gaussian σ = 1 % and 2 %, and the
  20 % step in uniform ± 5 %;
- one outlier run (30 % worse) at night 30, σ = 2 %;
- a profile switch at night 30 (another profile and params digest: another series; the
  figure doubles), σ = 2 %;
- a Redis upgrade at night 30 (redis_version changes; the absolute bench_rps falls 20 % and
  stays), σ = 2 %; and, beside it in the same environment, an unchanged ratio
  (pipeline_speedup), which is compared across the upgrade.

Figures are injected through the lake table retained_measures (one file per environment and
night, one row per series: the way retention keeps figures whose detail it dropped), with a
runs row (profile), a throughput steps row (params digest) and a fingerprint (redis_version)
per run. The bench checks that figure_trends has every point and that its judged value is
the value landed before counting anything.

Reported: for the scenarios without a change, the false-alarm rate per judged series-night
(nights with >= 10 comparable runs before; verdict regression, improvement or changed), the
share of series with any alarm, the share of nights from night 10 on that were judged (neither
'new' nor 'noisy': a 5 % change would have been seen) and those called 'noisy' and
'unconfirmed'; for the outlier,
switch and upgrade, the share of series with any regression/improvement from night 30 on and
what night 30 was called; for the steps, the false-alarm rate before the step, detection
(verdict regression) by night 30, 31 and 32 (night 30 alone can only be 'unconfirmed': a
regression needs two runs beyond the band), the miss rate (not detected by night 32), and
what nights 30-32 were called. `--vars` (a YAML/JSON mapping, repeatable) re-runs
figure_trends on the same lake with other dbt vars (verdict_band_sigmas,
verdict_small_sample, verdict_min_baseline, verdict_min_change_share) and prints the same
tables for each. The SQL project is copied at start (edits to sql/ during the run do not
matter) and dbt's state lives in the work folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import copy_sql  # noqa: E402 - beside this file, not a package

START = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
EVENT_NIGHT = 30
MIN_BASELINE = 10  # the default verdict_min_baseline: the first night judged
SPEEDUP, RPS = "pipeline_speedup", "bench_rps"
ALARMS = ("regression", "improvement", "changed")
DIGESTS = {"nightly": "9f8e7d6c5b4a", "quick": "0a1b2c3d4e5f"}
VERSIONS = ("7.2.4", "7.4.1")  # before / after the upgrade


@dataclass(frozen=True)
class Scenario:
    """Series of one kind: their noise, their event, the environment they live in."""

    name: str
    kind: str  # steady | step | outlier | switch | upgrade | upgrade-ratio
    noise: str  # gauss | t3 | uniform
    scale: float  # σ (gauss, t3) or half-width (uniform), as a share of the value
    step: float = 0.0  # share the figure falls by at the event (step, outlier, upgrade)
    env: str = "stable"
    figure: str = SPEEDUP
    base: float = 8.0

    @property
    def noise_label(self) -> str:
        """σ = 2 % / t3 σ = 2 % / ± 5 %."""
        pct = f"{self.scale * 100:g} %"
        return {"gauss": f"σ = {pct}", "t3": f"t3, σ = {pct}", "uniform": f"± {pct}"}[self.noise]


SCENARIOS = [
    Scenario("steady-g1", "steady", "gauss", 0.01),
    Scenario("steady-g2", "steady", "gauss", 0.02),
    Scenario("steady-g5", "steady", "gauss", 0.05),
    Scenario("steady-t3", "steady", "t3", 0.02),
    Scenario("steady-u5", "steady", "uniform", 0.05),
    Scenario("step5-g1", "step", "gauss", 0.01, 0.05),
    Scenario("step5-g2", "step", "gauss", 0.02, 0.05),
    Scenario("step10-g1", "step", "gauss", 0.01, 0.10),
    Scenario("step10-g2", "step", "gauss", 0.02, 0.10),
    Scenario("step20-g1", "step", "gauss", 0.01, 0.20),
    Scenario("step20-g2", "step", "gauss", 0.02, 0.20),
    Scenario("step20-u5", "step", "uniform", 0.05, 0.20),
    Scenario("outlier30-g2", "outlier", "gauss", 0.02, 0.30),
    Scenario("switch-g2", "switch", "gauss", 0.02, env="switch"),
    Scenario(
        "upgrade-g2", "upgrade", "gauss", 0.02, 0.20, env="upgrade", figure=RPS, base=100_000.0
    ),
    Scenario("upgrade-ratio-g2", "upgrade-ratio", "gauss", 0.02, env="upgrade"),
]
ENVS = {"stable": "no change", "switch": "profile switch", "upgrade": "Redis upgrade"}


# -- the lake --------------------------------------------------------------------------------


def noise(rng: np.random.Generator, sc: Scenario, shape: tuple[int, int]) -> np.ndarray:
    """Relative noise of the scenario's kind and size."""
    if sc.noise == "gauss":
        return rng.normal(0.0, sc.scale, shape)
    if sc.noise == "t3":  # Student-t with 3 d.f. has variance 3: scaled to σ = scale
        return rng.standard_t(3, shape) * sc.scale / np.sqrt(3.0)
    return rng.uniform(-sc.scale, sc.scale, shape)


def values(rng: np.random.Generator, sc: Scenario, replicates: int, nights: int) -> np.ndarray:
    """The landed values, replicates × nights."""
    level = np.full(nights, sc.base)
    after = np.arange(nights) >= EVENT_NIGHT
    if sc.kind in ("step", "upgrade"):
        level[after] *= 1 - sc.step
    elif sc.kind == "outlier" and nights > EVENT_NIGHT:
        level[EVENT_NIGHT] *= 1 - sc.step
    elif sc.kind == "switch":
        level[after] *= 2.0  # another workload: the figure doubles
    return level * (1 + noise(rng, sc, (replicates, nights)))


def night_profile(env: str, night: int) -> str:
    """The profile a night's run had: the switch environment changes it at the event."""
    return "quick" if env == "switch" and night >= EVENT_NIGHT else "nightly"


def night_version(env: str, night: int) -> str:
    """redis_version of a night's run: the upgrade environment changes it at the event."""
    return VERSIONS[1] if env == "upgrade" and night >= EVENT_NIGHT else VERSIONS[0]


def land(lake_dir: Path, data: dict[str, np.ndarray], replicates: int, nights: int) -> int:
    """Land every night of every environment; the number of files written."""
    from yardstick.storage import lake
    from yardstick.storage.schemas import TABLES, to_table

    files = 0
    for e, env in enumerate(ENVS):
        scenarios = [sc for sc in SCENARIOS if sc.env == env]
        figures = [sc.figure for sc in scenarios for _ in range(replicates)]
        subjects = [f"{sc.name}#{r}" for sc in scenarios for r in range(replicates)]
        for night in range(nights):
            started = START + timedelta(days=night)
            run_id = f"{started:%Y%m%dT%H%M%SZ}-{e:02x}{night:04x}"
            profile = night_profile(env, night)
            tables = {
                "runs": [
                    {
                        "profile": profile,
                        "started_at": started,
                        "finished_at": started,
                        "duration_s": 1.0,
                        "status": "ok",
                        "mode": "scratch",
                        "transport": "direct",
                        "url": "redis://x:1/0",
                        "same_server_as": None,
                        "prober_on_host": True,
                    }
                ],
                "steps": [
                    {
                        "family": "throughput",
                        "status": "ok",
                        "started_at": started,
                        "params_digest": DIGESTS[profile],
                    }
                ],
                "fingerprint": [
                    {"section": s, "key": k, "value": v}
                    for s, k, v in (
                        ("server", "redis_version", night_version(env, night)),
                        ("probe", "transport", "direct"),
                        ("probe", "prober_on_host", "true"),
                        ("prober", "cores", "2"),
                    )
                ],
            }
            column = np.concatenate([data[sc.name][:, night] for sc in scenarios])
            measures = pa.table(
                {
                    "figure": pa.array(figures, pa.string()),
                    "subject": pa.array(subjects, pa.string()),
                    "window_idx": pa.nulls(len(subjects), pa.int32()),
                    "value": pa.array(column, pa.float64()),
                    "samples": pa.nulls(len(subjects), pa.int64()),
                },
                schema=TABLES["retained_measures"],
            )
            for table, rows in tables.items():
                lake.write(lake_dir, table, env, run_id, to_table(table, rows))
            lake.write(lake_dir, "retained_measures", env, run_id, measures)
            files += len(tables) + 1
    return files


# -- reading the verdicts --------------------------------------------------------------------


def read_verdicts(
    wh: Path, data: dict[str, np.ndarray], replicates: int, nights: int
) -> dict[str, np.ndarray]:
    """Per scenario, replicates × nights verdicts from figure_trends, after checking that every
    landed point is there with its value as the judged value."""
    import duckdb

    con = duckdb.connect(str(wh), read_only=True)
    try:
        cols = con.execute(
            "select env, figure, split_part(subject, '#', 1) as name, "
            "try_cast(split_part(subject, '#', 2) as integer) as rep, "
            "date_diff('day', ?::timestamptz, started_at) as night, judged_value, verdict "
            "from figure_trends where env in ('stable', 'switch', 'upgrade')",
            [START],
        ).fetchnumpy()
    finally:
        con.close()
    total = len(cols["verdict"])
    verdicts = {}
    worst, seen = 0.0, 0
    for sc in SCENARIOS:
        mine = (cols["name"] == sc.name) & (cols["env"] == sc.env) & (cols["figure"] == sc.figure)
        rep = np.asarray(cols["rep"][mine], dtype=np.int64)
        night = np.asarray(cols["night"][mine], dtype=np.int64)
        grid = np.full((replicates, nights), "", dtype=object)
        grid[rep, night] = np.asarray(cols["verdict"][mine], dtype=object)
        expected = data[sc.name][rep, night]
        judged = np.asarray(cols["judged_value"][mine], dtype=np.float64)
        if len(rep):
            worst = max(worst, float(np.max(np.abs(judged - expected) / np.abs(expected))))
        seen += int((grid != "").sum())
        verdicts[sc.name] = grid
    want = len(SCENARIOS) * replicates * nights
    if seen != want or total != want or not worst <= 1e-9:
        raise SystemExit(
            f"figure_trends does not hold the landed series: {seen} of {want} points "
            f"({total} rows), worst judged-value error {worst:.2e}"
        )
    return verdicts


# -- the figures -----------------------------------------------------------------------------


def pct(x: float) -> str:
    """A share as a percentage (more digits for small ones)."""
    if x == 0:
        return "0"
    if x < 0.001:
        return f"{x * 100:.3f} %"
    if x < 0.01:
        return f"{x * 100:.2f} %"
    return f"{x * 100:.1f} %"


def counted(mask: np.ndarray) -> str:
    """Share of True with its count: small shares rest on few events."""
    return f"{pct(share(mask))} ({int(mask.sum())})"


def share(mask: np.ndarray) -> float:
    """Share of True in a boolean array (0 when empty)."""
    return float(mask.mean()) if mask.size else 0.0


def is_alarm(v: np.ndarray) -> np.ndarray:
    """Verdicts that would raise an alarm."""
    return np.isin(v, ALARMS)


def mix(v: np.ndarray) -> str:
    """The most common verdicts of a set, with their shares."""
    counts = Counter(v.ravel().tolist())
    total = sum(counts.values())
    return ", ".join(f"{k} {pct(c / total)}" for k, c in counts.most_common(2))


def no_change_table(verdicts: dict[str, np.ndarray], nights: int, first: int) -> list[str]:
    """The scenarios without a real change in the series' own workload and environment."""
    out = [
        "| scenario | noise | false alarms per judged series-night | series with any alarm "
        "| judged (not new/noisy) | noisy | unconfirmed | night 30 called |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for sc in SCENARIOS:
        if sc.kind == "step":
            continue
        v = verdicts[sc.name]
        judged = v[:, first:]
        if sc.kind == "steady":
            fa = counted(is_alarm(judged))
            anyalarm = counted(is_alarm(judged).any(axis=1))
            night30 = "—"
        else:
            # From the event on: nights 30.. (the series of the switch starts again as 'new').
            judged_before = v[:, first:EVENT_NIGHT]
            fa = f"{counted(is_alarm(judged_before))} before 30"
            anyalarm = f"{counted(is_alarm(v[:, EVENT_NIGHT:]).any(axis=1))} from 30 on"
            night30 = mix(v[:, EVENT_NIGHT]) if nights > EVENT_NIGHT else "—"
        usable = pct(share(~np.isin(v[:, first:], ("new", "noisy"))))
        out.append(
            f"| {sc.name} | {sc.noise_label} | {fa} | {anyalarm} | {usable} "
            f"| {pct(share(judged == 'noisy'))} | {pct(share(judged == 'unconfirmed'))} "
            f"| {night30} |"
        )
    steady = np.concatenate([verdicts[sc.name] for sc in SCENARIOS if sc.kind == "steady"])
    early, late = steady[:, first:20], steady[:, 20:]
    out.append(
        f"\nSteady scenarios together, by comparable runs before: {first}–19: false alarms "
        f"{counted(is_alarm(early))} of {early.size:,} series-nights; 20 or more: "
        f"{counted(is_alarm(late))} of {late.size:,}."
    )
    return out


def step_table(verdicts: dict[str, np.ndarray], nights: int, first: int) -> list[str]:
    """The steps: alarms before, detection after."""
    out = [
        f"| scenario | noise | step | false alarms before (nights {first}–29) "
        + "| detected by night 30 | by 31 | by 32 | missed (not by 32) | by 39 "
        + "| nights 30–32: noisy | unconfirmed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sc in SCENARIOS:
        if sc.kind != "step":
            continue
        v = verdicts[sc.name]
        regression = v == "regression"

        def by(night: int, regression=regression) -> float:
            return share(regression[:, EVENT_NIGHT : night + 1].any(axis=1))

        after = v[:, EVENT_NIGHT : EVENT_NIGHT + 3]
        out.append(
            f"| {sc.name} | {sc.noise_label} | −{sc.step * 100:g} % "
            f"| {counted(is_alarm(v[:, first:EVENT_NIGHT]))} "
            f"| {pct(by(30))} | {pct(by(31))} | {pct(by(32))} | {pct(1 - by(32))} "
            f"| {pct(by(nights - 1))} "
            f"| {pct(share(after == 'noisy'))} | {pct(share(after == 'unconfirmed'))} |"
        )
    return out


def rebuild_trends(wh: Path, overrides: dict) -> float:
    """Re-run figure_trends alone (full refresh: every run of the build's batch) with other
    dbt vars; seconds."""
    from yardstick.storage import dbt

    start = time.perf_counter()
    dbt.run(
        wh, ["run", "--full-refresh", "--select", "figure_trends", "--vars", json.dumps(overrides)]
    )
    return time.perf_counter() - start


def parse_vars(text: str) -> dict:
    """A --vars mapping (YAML, so JSON too)."""
    import yaml

    parsed = yaml.safe_load(text)
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"--vars wants a mapping, got {text!r}")
    return parsed


def main() -> None:
    """Land the series, build the warehouse, read the verdicts, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=4000, help="series per scenario")
    parser.add_argument("--nights", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--vars",
        type=parse_vars,
        action="append",
        default=[],
        help="dbt vars for another pass over the same lake (repeatable)",
    )
    parser.add_argument("--root", type=Path, default=Path("/work/bench-tmp"))
    parser.add_argument("--keep", action="store_true", help="keep the lake and warehouse")
    args = parser.parse_args()
    if args.nights <= EVENT_NIGHT + 2:
        parser.error(f"--nights must exceed {EVENT_NIGHT + 2} (the event is at night 30)")

    wall = time.perf_counter()
    work = args.root / f"verdicts-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # dbt's state (parse cache, lock) in the work folder: never shared with other processes.
    os.environ["YARDSTICK_DBT_STATE"] = str(work / "dbt-state")
    from yardstick.storage import dbt, warehouse

    sql = copy_sql(work)
    dbt.project_dir = lambda: sql  # the copy taken at the bench's start
    try:
        rng = np.random.default_rng(args.seed)
        data = {sc.name: values(rng, sc, args.replicates, args.nights) for sc in SCENARIOS}
        t0 = time.perf_counter()
        files = land(work / "lake", data, args.replicates, args.nights)
        land_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        wh = work / "verdicts.duckdb"
        warehouse.build(work / "lake", wh)
        build_s = time.perf_counter() - t0
        series = len(SCENARIOS) * args.replicates
        print(
            f"{len(SCENARIOS)} scenarios × {args.replicates} series × {args.nights} nights "
            f"= {series * args.nights:,} points in {len(ENVS)} environments "
            f"({files} lake files, landed in {land_s:.1f} s); warehouse build {build_s:.1f} s"
        )
        passes: list[tuple[dict, float]] = [({}, 0.0), *((v, -1.0) for v in args.vars)]
        for overrides, seconds in passes:
            if overrides:
                seconds = rebuild_trends(wh, overrides)
            verdicts = read_verdicts(wh, data, args.replicates, args.nights)
            label = json.dumps(overrides) if overrides else "defaults"
            timing = f" (figure_trends re-run {seconds:.1f} s)" if overrides else ""
            print(f"\n### dbt vars: {label}{timing}\n")
            first = int(overrides.get("verdict_min_baseline", MIN_BASELINE))
            print("\n".join(no_change_table(verdicts, args.nights, first)))
            print()
            print("\n".join(step_table(verdicts, args.nights, first)))
            totals = defaultdict(int)
            for v in verdicts.values():
                for k, c in Counter(v.ravel().tolist()).items():
                    totals[k] += c
            print(
                "\nverdicts of every point: "
                + ", ".join(f"{k} {c:,}" for k, c in sorted(totals.items(), key=lambda kv: -kv[1]))
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    cmd = shlex.join(["bench/verdicts.py", *sys.argv[1:]])
    print(
        f"\n{cmd}: wall time {time.perf_counter() - wall:.1f} s "
        f"on {os.cpu_count()} cores; seed {args.seed}"
    )


if __name__ == "__main__":
    main()
