"""Every bench script at its tiny size, in a subprocess (`--tiny --json <tmp>`): it runs, its
record has the harness's shape (bench/_harness.py) and each bench's own checks hold. A bench
script without a case here fails the suite (pyperf's test_examples.py does the same for its
examples). No time is asserted: the figures belong to the benches at their full size."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))  # readme_table and the benches' constants, as modules
# In bench/ but no bench: two records side by side, and retention's README table.
TOOLS = {"compare", "readme_table"}


@dataclass(frozen=True)
class Case:
    """How one bench is run tiny and what its record must hold."""

    check: Callable[[dict, str], None]
    args: tuple[str, ...] = ()  # beyond --tiny --json
    root: bool = False  # the bench takes --root (given a folder of the test's)
    marks: tuple = ()
    timeout_s: float = 600
    skip: Callable[[], str | None] = field(default=lambda: None)


def _load(name: str):
    """bench/<name>.py as a module (its constants), loaded by path: bench/ is no package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# --- each bench's own checks --------------------------------------------------------------


def check_cli_latency(record: dict, out: str) -> None:
    """Every command it measures ran once, with the exit code it should have."""
    commands = ["help", "version", "run_help", "bad_file", "bad_flag", "trend", "changes"]
    assert record["rounds"] == 1 and list(record["trees"]) == ["here"]
    results = record["results"]
    assert [r["command"] for r in results] == commands
    for r in results:
        assert r["runs"] == 1 and r["exit_ok"], r
        assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_bytes"] > 0, r
        assert isinstance(r["heavy_imports"], list) and isinstance(r["within_1s"], bool)
    # The refusals are one line each.
    assert all(r["stderr_lines"] == 1 for r in results if r["command"].startswith("bad_"))
    assert "median of 1 runs" in out


def _cluster_unavailable() -> str | None:
    """Why the cluster bench cannot run here (no redis-cli beside the newest server)."""
    sys.path.insert(0, str(REPO / "tests"))
    from topologies import redis_cli_for

    from yardstick.host.embedded import newest_redis_server

    binary = newest_redis_server()
    if binary is None or redis_cli_for(binary) is None:
        return "no redis-cli beside the newest redis-server: the bench cannot make a cluster"
    return None


def check_cluster(record: dict, out: str) -> None:
    """Every node ended ok (its self-check) and every figure is there."""
    assert record["self_check"] == {"ok": True, "problems": []}
    figures = record["figures"]
    names = _load("cluster").FIGURES
    missing = [name for name in names if figures.get(name) is None]
    assert not missing, f"figures missing from the JSON: {missing}"
    assert all(figures[name] > 0 for name in names), figures
    assert record["settings"]["nodes"] == 6 and record["settings"]["tiny"]
    assert len(record["measured"]["measure_s"]["cluster"]) == 1


def check_collect_round(record: dict, out: str) -> None:
    """Each way's figures: no warm-up round, a short idle sample, the targets."""
    assert record["envs"] == 2 and set(record["results"]) == {"import", "worker", "cli"}
    assert record["warm_up"] is False and record["server_idle_cpu_s_per_s"] >= 0
    for way, by_code in record["results"].items():
        median = by_code["this"]["median"]
        assert median["exits"] == [0], way
        assert median["cpu_s"] > 0 and median["wall_s"] > 0
    worker = record["results"]["worker"]["this"]["median"]
    assert worker["all_in_cpu_s"] == pytest.approx(worker["cpu_s"] + worker["server_cpu_s"])
    assert record["targets"] == {"all_in_cpu_s": 3.0, "wall_s": 5.0}


def check_collect_wall(record: dict, out: str) -> None:
    """The new path ran once under the worker and its database rows were counted."""
    (run,) = record["runs"]["new"]
    assert run["state"] == "COMPLETED" and run["body_s"] > 0, run
    assert sum(v for t, v in record["rows"]["new"].items() if not t.startswith("KiB")) > 0


def check_keyspace_models(record: dict, out: str) -> None:
    """Every per-key model measured against the scan; the top-N marts equal their sort-based
    definitions on keys full of ties."""
    per_key = {"keyspace_top_keys", "keyspace_types", "keyspace_prefixes", "keyspace_scan_costs"}
    figures = record["figures"]
    assert set(figures) >= {"scan"} | per_key, sorted(figures)
    for name, fig in figures.items():
        assert fig["cpu_s"] >= 0 and fig["peak_rss_bytes"] > 0, (name, fig)
        assert fig["ratio_to_scan"] is not None, name
        if name != "scan":
            assert isinstance(fig["within_target"], bool), name
            assert fig["result_rows"] > 0, name
    assert record["target_ratio"] == 3.0
    assert all(check["equal"] for check in record["reference"].values()), record["reference"]
    assert "| keyspace_top_keys |" in out


def check_lake_files(record: dict, out: str) -> None:
    """Both schemes' small-lake moments and the extrapolated worst moments add up."""
    for scheme in ("today", "change"):
        run = record[scheme]
        assert len(run["steps"]) == 4 and run["small_lake_peak"]["total"] > 0
        assert run["month_files_per_env"] > 0 and run["pass_cpu_s"] >= 0
    model = record["model"]
    for name in ("today", "change_daytime", "change_after_nightly"):
        parts = {k: v for k, v in model[name].items() if k != "files"}
        assert model[name]["files"] == pytest.approx(sum(parts.values()), abs=len(parts))
    worst = max(model["change_daytime"]["files"], model["change_after_nightly"]["files"])
    assert abs(model["change"] - worst) <= 1
    assert model["change_measured_scaled"] > 0 and model["target"] == 30_000
    assert "worst moment: today" in out


def check_lake_s3(record: dict, out: str) -> None:
    """Both lakes landed, compacted and built."""
    assert set(record["lakes"]) == {"local disk", "S3 (moto, loopback)"}
    assert all(lake["commits"] > 0 and lake["build_s"] > 0 for lake in record["lakes"].values())


def check_landing(record: dict, out: str) -> None:
    """Every lake's figures; one commit per table against a file per table and environment."""
    assert set(record["lakes"]) == {"local disk", "S3 (moto, loopback)"}
    for lake in record["lakes"].values():
        assert lake["delta_s"] > 0 and lake["legacy_s"] > 0
        assert lake["delta_commits"] < lake["legacy_files"]
    assert "runs" in record["tables"]
    assert "| local disk |" in out


def check_memkeys(record: dict, out: str) -> None:
    """The three scans ran in the quiet phase and found the same keys."""
    names = {m["name"] for m in record["metrics"]}
    assert {f"quiet/{t}/keys_per_s" for t in ("redis-cli --memkeys", "yardstick scan")} <= names


def check_prefect_db(record: dict, out: str) -> None:
    """Both paths' collections completed and added rows to the server's database."""
    assert [(c["path"], c["envs"]) for c in record["cases"]] == [("old", 1), ("new", 1)]
    for case in record["cases"]:
        assert case["states"] == ["COMPLETED"] and case["rows"].get("flow_run", 0) >= 1, case


def check_probe_overhead(record: dict, out: str) -> None:
    """Both comparisons have their ratios."""
    assert len(record["ratios"]) == 1 and record["ratios"][0] > 0
    assert "back to back" in out


def check_real_shape(record: dict, out: str) -> None:
    """Every run kind landed rows; the tiny shape never replaces bench/real_shape.json."""
    assert set(record["rows"]) == {
        "scratch_nightly", "read_only_nightly", "scratch_collection", "read_only_collection"
    }  # fmt: skip
    assert all(sum(rows.values()) > 0 for rows in record["rows"].values()), record["rows"]
    assert Path(record["shape"]) != BENCH / "real_shape.json"


RETENTION_FIGURES = (
    "lake_files lake_bytes files_per_table rebuild_wall_s rebuild_load_s rebuild_models_s"
    " rebuild_rss_bytes incremental_wall_s incremental_rss_bytes first_update_wall_s"
    " warm_update_wall_s first_vs_warm_change files_per_collection"
    " slowlog_rows_quiet_collection slowlog_rows_per_collection trend_query_ms top_nodes"
    " rederive_wall_s rebuild_from_derived_runs"
).split()


def check_retention(record: dict, out: str) -> None:
    """Its self-checks held (every declared table in the real shape, every real table
    generated, landed and compacted files equal to the direct writer's), every figure and
    target is there, and collections land only what is new."""
    assert record["self_check"]["ok"], record["self_check"]
    assert record["self_check"]["shape"]["problems"] == []
    figures = record["figures"]
    missing = [name for name in RETENTION_FIGURES if figures.get(name) is None]
    assert not missing, f"figures missing from the JSON: {missing}"
    assert {t["name"] for t in record["targets"]} >= {
        "rebuild_wall_s", "rebuild_rss_bytes", "incremental_wall_s", "incremental_rss_bytes",
        "doubling_change", "first_vs_warm_change", "lake_files", "files_per_collection",
        "slowlog_rows_quiet_collection", "trend_query_ms",
    }  # fmt: skip
    # Tiny: the history is not doubled, so only the doubling's target is unmeasured.
    unmeasured = [t["name"] for t in record["targets"] if t["measured"] is None]
    assert unmeasured == ["doubling_change"], record["targets"]
    assert list(record["measured"]) == ["4"]
    run = record["measured"]["4"]
    warm = [n["update"] for n in run["warm_nights"]]
    for update in (run["rederive"], run["rebuild"], run["first_night"]["update"], *warm):
        assert "error" not in update, update
    assert [u["mode"] for u in warm] == ["incremental"]
    # The second rebuild imported the closed days the first one kept in the lake.
    assert run["rederive"]["from_derived"] == 0
    assert 0 < run["rebuild"]["from_derived"] < run["rebuild"]["runs_added"]
    assert figures["quiet_collections"] > 0
    assert figures["slowlog_rows_quiet_collection"] == 0
    import readme_table

    assert "| target (50 environments × 365 days)" in readme_table.table(record)


def check_runtime_modes(record: dict, out: str) -> None:
    """The plain mode's figures (no server)."""
    figures = record["figures"]
    assert set(figures) == {"plain"}
    assert figures["plain"]["cpu_s"] > 0 and figures["plain"]["server_cpu_s"] == 0
    assert "| plain |" in out


def check_self_cost(record: dict, out: str) -> None:
    """P2, the tool's CPU by phase within the process tree's, its share of the machine."""
    (run,) = record["runs"]
    assert run["environments"] == ["embedded"]  # the forwarded twin left out: the CI's time
    assert run["windows_s"] > 0 and run["process_wall_s"] > 0
    assert 0 < run["p2_windows_over_wall"] == run["windows_s"] / run["process_wall_s"]
    assert set(run["tool_cpu_s_by_phase"]) == {
        "start", "measure", "landing", "warehouse", "rendering"
    }  # fmt: skip
    assert all(cpu_s >= 0 for cpu_s in run["tool_cpu_s_by_phase"].values())
    assert sum(run["tool_cpu_s_by_phase"].values()) <= run["tool_cpu_s"] + 1e-6
    # The tool's own rows stay within what the kernel counted for the whole process tree.
    assert run["tool_cpu_s"] + run["measurement_tools_cpu_s"] <= run["process_tree_cpu_s"] + 0.05
    assert 0 < run["tool_share_of_cores"] <= 1
    assert record["summary"]["target_p2"] == 0.75
    assert "P2" in out


def check_sites(record: dict, out: str) -> None:
    """Both variants ran once and completed."""
    assert [r["variant"] for r in record["runs"]] == ["one run", "fan-out"]
    assert all(r["state"] == "COMPLETED" for r in record["runs"]), record["runs"]


def check_verdicts(record: dict, out: str) -> None:
    """Every scenario's figures and every target of issue 30 (met or missed), for the
    defaults and a --vars pass; no figure is asserted (2 series a scenario are noise)."""
    bench = _load("verdicts")
    assert [p["vars"] for p in record["passes"]] == [{}, {"verdict_alpha": 0.002}]
    for figures in (p["figures"] for p in record["passes"]):
        assert set(figures) == {sc.name for sc in bench.SCENARIOS}
        assert all(
            "by_32" in figures[sc.name] for sc in bench.SCENARIOS if sc.kind in bench.CHANGES
        )
    for targets in (p["targets"] for p in record["passes"]):
        assert [t["target"] for t in targets] == [t.label for t in bench.TARGETS]
        assert all(isinstance(t["met"], bool) for t in targets)
    assert "| target | bound | measured |" in out
    # The numpy CUSUM peers ran beside the rule on every target they can be judged on; Otava
    # only when asked (--peers: a venv of its own, never at this size).
    peer_labels = {t.label for t in bench.peer_targets()}
    assert record["peers"] and all(
        {r["target"] for r in p["targets"]} == peer_labels for p in record["peers"].values()
    )
    assert record["otava"].startswith("not asked") and "margin (points)" in out


def check_causes(record: dict, out: str) -> None:
    """Every scenario counted, and the three targets recorded (met or missed)."""
    bench = _load("causes")
    assert set(record["scenarios"]) == {sc.name for sc in bench.SCENARIOS}
    names = {m["name"]: m for m in record["metrics"]}
    for target in ("planted_ranked_first", "alone_cause_named", "steady_any_cause_row"):
        assert isinstance(names[target]["met"], bool), names
    assert "planted cause ranked first:" in out


def _no_redis_benchmark() -> str | None:
    """Why the probe-overhead bench cannot run here (it times redis-benchmark)."""
    from yardstick.host.tools import find_tool

    return None if find_tool("redis-benchmark") else "redis-benchmark not installed"


E2E = (pytest.mark.e2e,)
AGNOSTIC = (pytest.mark.server_agnostic,)  # the bench's own servers: not rerun per server
CASES: dict[str, Case] = {
    "causes": Case(check_causes, root=True),
    "cli_latency": Case(check_cli_latency, root=True, marks=E2E),
    "cluster": Case(check_cluster, root=True, marks=E2E + AGNOSTIC, skip=_cluster_unavailable),
    "collect_round": Case(check_collect_round, root=True, marks=E2E + AGNOSTIC),
    "collect_wall": Case(check_collect_wall, args=("--home",), marks=E2E + AGNOSTIC),
    "keyspace_models": Case(check_keyspace_models, root=True),
    "lake_files": Case(check_lake_files, root=True, marks=AGNOSTIC),
    "lake_s3": Case(check_lake_s3, root=True),
    "landing": Case(check_landing, root=True, marks=AGNOSTIC),
    "memkeys": Case(check_memkeys, marks=AGNOSTIC),
    "prefect_db": Case(check_prefect_db, args=("--home",), marks=E2E + AGNOSTIC),
    "probe_overhead": Case(check_probe_overhead, marks=AGNOSTIC, skip=_no_redis_benchmark),
    "real_shape": Case(check_real_shape, root=True, marks=E2E + AGNOSTIC),
    "retention": Case(check_retention, root=True, marks=E2E),
    "runtime_modes": Case(check_runtime_modes, marks=AGNOSTIC),
    "self_cost": Case(check_self_cost, root=True, marks=E2E + AGNOSTIC, timeout_s=900),
    "sites": Case(check_sites, marks=E2E + AGNOSTIC),
    "verdicts": Case(check_verdicts, args=("--vars", "{verdict_alpha: 0.002}"), root=True),
}


def bench_scripts() -> list[str]:
    """Every bench script: bench/*.py but the harness's modules (_*.py) and the tools."""
    return sorted(
        p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.stem not in TOOLS
    )


def test_every_bench_script_is_run_here():
    """A new bench script without a tiny case here fails, as one left behind does."""
    assert sorted(CASES) == bench_scripts()


def run_tiny(name: str, tmp_path: Path) -> tuple[dict, str, float]:
    """Run bench/<name>.py --tiny; its record, its output and its wall time."""
    case = CASES[name]
    out = tmp_path / f"{name}.json"
    args = list(case.args)
    if "--home" in args:  # the bench's PREFECT_HOME, in the test's folder
        args[args.index("--home") + 1 : args.index("--home") + 1] = [str(tmp_path / "home")]
    if case.root:
        args += ["--root", str(tmp_path / "root")]
        (tmp_path / "root").mkdir()
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--tiny", "--json", str(out), *args],
        capture_output=True, text=True, timeout=case.timeout_s, cwd=REPO,
    )  # fmt: skip
    wall_s = time.perf_counter() - started
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text()), proc.stdout, wall_s


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=CASES[name].marks) for name in sorted(CASES)]
)
def test_bench_runs_tiny(name, tmp_path):
    """The bench runs at its tiny size; its record has the harness's keys and its own."""
    why = CASES[name].skip()
    if why:
        pytest.skip(why)
    record, out, wall_s = run_tiny(name, tmp_path)
    print(f"{name}: tiny run {wall_s:.1f} s")
    assert record["format"] == "yardstick-bench/1" and record["bench"] == name
    assert "--tiny" in record["argv"] and record["started"] <= record["ended"]
    assert record["cpu_s"] > 0 and record["environment"]["git"]["commit"]
    assert record["environment"]["machine"]["cores"] >= 1
    assert record["metrics"], "no figure recorded"
    for metric in record["metrics"]:
        assert metric["unit"] and set(metric) >= {"name", "value", "target", "met"}, metric
    CASES[name].check(record, out)
    # What the bench made in its root is gone (but where a bench keeps its work, its store).
    kept = ("cluster", "collect_round", "real_shape", "retention", "self_cost")
    if CASES[name].root and name not in kept:
        assert not [p for p in (tmp_path / "root").iterdir()], list((tmp_path / "root").iterdir())


def test_compare_puts_two_records_side_by_side(tmp_path):
    """bench/compare.py: each figure of both records, with the ratio; a bad file is one line."""
    import compare

    def record(value: float) -> dict:
        metric = {"name": "wall_s", "value": value, "unit": "s", "target": 5.0, "met": True}
        return {"bench": "x", "metrics": [metric], "started": "2026-12-02T00:00:00+00:00"}

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(record(2.0)))
    b.write_text(json.dumps(record(3.0)))
    proc = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), str(a), str(b)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "| wall_s | s | 2 | 3 | 1.50 | 5 |" in proc.stdout
    # An older record (no metrics) is read by its numeric figures.
    old = compare.figures_of({"figures": {"lake_files": 10, "nested": {"x_s": 1.5}}})
    assert old == {"lake_files": (10.0, "", None), "nested.x_s": (1.5, "", None)}
    proc = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), str(a), str(tmp_path / "missing.json")],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
