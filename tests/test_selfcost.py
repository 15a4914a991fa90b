"""The tool's own cost (yardstick/host/selfcost.py): the meter on this real process, the lake
table and its models, and a real run that lands and reports it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from conftest import needs_tool
from lakes import new_run, runs_row, steps

from yardstick.flows.landing import land_tool_cost
from yardstick.host import selfcost
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake


def _burn(seconds: float) -> None:
    """Keep this thread on a CPU for about `seconds` of its own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _rows(meter: selfcost.Meter) -> dict[tuple[str, str, str], selfcost.CostRow]:
    return {(r.env, r.phase, r.family): r for r in meter.rows()}


def test_phases_count_the_process_and_sum_within_its_total():
    meter = selfcost.Meter(since_process_start=False)
    with meter.phase("measure"):
        _burn(0.2)
    with meter.phase("warehouse"):
        _burn(0.05)
    meter.finish()
    rows = _rows(meter)
    assert {p for _, p, _ in rows} == {"start", "measure", "warehouse", "total"}
    assert rows[("", "measure", "")].cpu_s >= 0.19
    assert all(r.cpu_s >= 0 and r.wall_s >= 0 and r.peak_rss_bytes > 0 for r in rows.values())
    phases = sum(r.cpu_s for (_, p, _), r in rows.items() if p != "total")
    assert phases <= rows[("", "total", "")].cpu_s + 1e-6
    assert rows[("", "measure", "")].host_busy_cpu_s >= rows[("", "measure", "")].cpu_s * 0.5


def test_the_first_meter_of_a_process_counts_its_start_imports_included():
    """In a fresh interpreter the start phase holds the imports' CPU and begins at the
    process's start, not at the meter's creation."""
    code = (
        "import time; t0 = time.time()\n"
        "import pyarrow, yardstick.host.selfcost as s\n"
        "m = s.Meter()\n"
        "with m.phase('measure'): pass\n"
        "start = [r for r in m.rows() if r.phase == 'start'][0]\n"
        "print(start.cpu_s, start.started_at.timestamp() <= t0 + 0.01, start.peak_rss_bytes)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    cpu_s, before, peak = out.stdout.split()
    assert float(cpu_s) > 0.05  # importing pyarrow alone costs more
    assert before == "True"
    assert int(peak) > 10 * 2**20


def test_a_family_counts_its_own_thread_and_says_when_another_ran_beside_it():
    meter = selfcost.Meter(since_process_start=False)
    gate = threading.Barrier(2)

    def family(name: str, seconds: float) -> None:
        with meter.family(name, f"env-{name}"):
            gate.wait()
            _burn(seconds)
            gate.wait()

    with meter.phase("measure"):
        threads = [
            threading.Thread(target=family, args=(n, s)) for n, s in (("a", 0.3), ("b", 0.05))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with meter.family("c", "env-c"):
            _burn(0.05)
    rows = _rows(meter)
    a, b, c = (
        rows[("env-a", "family", "a")],
        rows[("env-b", "family", "b")],
        rows[("env-c", "family", "c")],
    )
    assert a.cpu_scope == "thread" and a.cpu_s >= 0.29 and b.cpu_s < 0.2  # each its own
    assert a.overlapped and b.overlapped and not c.overlapped
    # The run-wide phase holds both threads.
    assert rows[("", "measure", "")].cpu_s >= a.cpu_s + b.cpu_s - 0.01


def test_children_cpu_is_the_tools_load_not_the_tools_own():
    meter = selfcost.Meter(since_process_start=False)
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    with meter.phase("measure"), meter.family("throughput", "env-a"):
        subprocess.run([sys.executable, "-c", burn], check=True)
    rows = _rows(meter)
    for key in (("", "measure", ""), ("env-a", "family", "throughput")):
        assert rows[key].children_cpu_s >= 0.29
    assert rows[("env-a", "family", "throughput")].cpu_s < 0.25


@pytest.mark.skipif(not selfcost.CLEAR_REFS.exists(), reason="needs Linux /proc/self/clear_refs")
def test_peak_memory_is_each_phases_own():
    meter = selfcost.Meter(since_process_start=False)
    if not meter.resettable:
        pytest.skip("/proc/self/clear_refs is not writable here (ru_maxrss stands in)")
    with meter.phase("measure"):
        big = bytearray(200 * 2**20)
        big[::4096] = b"x" * len(big[::4096])  # touched: resident
        del big
    with meter.phase("warehouse"):
        pass
    meter.finish()
    rows = _rows(meter)
    measure, after = rows[("", "measure", "")], rows[("", "warehouse", "")]
    assert measure.rss_source == "VmHWM"
    assert measure.peak_rss_bytes - after.peak_rss_bytes > 150 * 2**20
    assert rows[("", "total", "")].peak_rss_bytes >= measure.peak_rss_bytes


def test_a_watched_server_is_counted_apart():
    burn = (
        "import time\nend = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\nprint('burned', flush=True)\ntime.sleep(60)"
    )
    meter = selfcost.Meter(since_process_start=False)
    with meter.phase("measure"):
        server = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
        meter.watch(server.pid)
        assert server.stdout.readline().strip() == "burned"  # its CPU spent, whatever the load
    server.kill()
    server.wait()
    row = _rows(meter)[("", "measure", "")]
    assert row.server_cpu_s is not None and row.server_cpu_s >= 0.25
    assert row.cpu_s < row.server_cpu_s


def test_rows_land_once_under_their_environment_and_the_carrier(tmp_path):
    meter = selfcost.Meter(since_process_start=False)
    with meter.phase("measure"):
        with meter.family("round_trip", "b"):
            pass
        with meter.landing("b"):
            pass
    run_id = delta.new_run_id()
    assert land_tool_cost(meter, Lake.at(str(tmp_path)), run_id, carrier="a") == 4
    assert land_tool_cost(meter, Lake.at(str(tmp_path)), run_id, carrier="a") == 0  # never twice
    with meter.phase("warehouse"):
        pass
    meter.finish()
    assert land_tool_cost(meter, Lake.at(str(tmp_path)), run_id, "a", selfcost.LATE_PHASES) == 2
    landed = delta.read(Lake.at(tmp_path), "tool_cost").to_pylist()
    by_env = {(r["env"], r["phase"], r["run_wide"]) for r in landed}
    assert by_env == {
        ("a", "start", True),
        ("a", "measure", True),
        ("b", "family", False),
        ("b", "landing", False),
        ("a", "warehouse", True),
        ("a", "total", True),
    }
    # Two commits: the run's rows, then its late phases.
    assert len(Lake.at(tmp_path).table("tool_cost").history()) == 2


def _cost_row(phase: str, cpu_s: float, at: datetime, **fields) -> dict:
    row = {
        "run_wide": True,
        "phase": phase,
        "family": "",
        "cpu_scope": "process",
        "cpu_s": cpu_s,
        "children_cpu_s": 0.5,
        "server_cpu_s": None,
        "peak_rss_bytes": 200 * 2**20,
        "rss_source": "VmHWM",
        "wall_s": 2 * cpu_s,
        "started_at": at,
        "finished_at": at + timedelta(seconds=2 * cpu_s),
        "overlapped": False,
        "host_busy_cpu_s": 3 * cpu_s,
        "cores": 2,
        "prober_hostname": "prober",
        "prober_pid": 42,
    }
    return {**row, **fields}


def _land_run(lake_dir, at: datetime) -> str:
    """Two environments of one run by one process: a (the carrier) and b."""
    run_id = delta.new_run_id(at)
    for env in ("a", "b"):
        run = new_run(lake_dir, env, at, run_id)
        steps(run, ["round_trip"], window_s=5.0)
        runs_row(run, prober_hostname="prober", prober_pid=42)
    first = [_cost_row("start", 1.0, at), _cost_row("measure", 4.0, at)]
    run = new_run(lake_dir, "a", at, run_id)
    run.write("tool_cost", first)
    family = _cost_row("family", 0.25, at, run_wide=False, family="round_trip", cpu_scope="thread")
    new_run(lake_dir, "b", at, run_id).write("tool_cost", [family])
    return run_id


def test_the_marts_keep_the_cost_and_the_report_views_show_it_per_environment(tmp_path):
    at = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
    lake_dir, path = tmp_path / "lake", tmp_path / "w.duckdb"
    run_id = _land_run(lake_dir, at)
    warehouse.update(Lake.at(lake_dir), path)
    con = warehouse.connect_read_only(path)
    try:
        marts = con.execute(
            "select env, phase, cpu_s, cpu_share_of_cores from marts.tool_cost order by phase"
        ).fetchall()
        assert [(e, p) for e, p, _, _ in marts] == [
            ("b", "family"),
            ("a", "measure"),
            ("a", "start"),
        ]
        assert marts[1][3] == pytest.approx(4.0 / (8.0 * 2))
        shown = con.execute(
            "select phase, family from report_tool_cost where run_id = ? and env = 'b' "
            "order by phase_order",
            [run_id],
        ).fetchall()
        assert shown == [("start", ""), ("measure", ""), ("family", "round_trip")]
        ratio = con.execute(
            "select tool_cpu_s, windows_s, tool_cpu_per_window_s from report_tool_cost_run "
            "where run_id = ? and env = 'a'",
            [run_id],
        ).fetchone()
        windows = con.execute(
            "select sum(window_s) from steps where run_id = ?", [run_id]
        ).fetchone()[0]
        assert ratio[0] == pytest.approx(5.0) and ratio[1] == pytest.approx(windows) == 10.0
        assert ratio[2] == pytest.approx(0.5)
    finally:
        con.close()


def test_a_full_rebuild_has_the_late_phases_of_a_loaded_run(tmp_path):
    at = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
    lake_dir, path = tmp_path / "lake", tmp_path / "w.duckdb"
    run_id = _land_run(lake_dir, at)
    warehouse.update(Lake.at(lake_dir), path)
    late = [_cost_row("warehouse", 3.0, at), _cost_row("rendering", 0.5, at)]
    new_run(lake_dir, "a", at, run_id).write("tool_cost", late)
    warehouse.update(Lake.at(lake_dir), path, full=True)
    con = warehouse.connect_read_only(path)
    try:
        phases = {r[0] for r in con.execute("select phase from marts.tool_cost").fetchall()}
    finally:
        con.close()
    assert {"warehouse", "rendering"} <= phases


def test_the_next_update_loads_the_late_phases_of_a_loaded_run(tmp_path):
    at = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
    lake_dir, path = tmp_path / "lake", tmp_path / "w.duckdb"
    run_id = _land_run(lake_dir, at)
    warehouse.update(Lake.at(lake_dir), path)
    late = [_cost_row("warehouse", 3.0, at), _cost_row("rendering", 0.5, at)]
    new_run(lake_dir, "a", at, run_id).write("tool_cost", late)
    # An update with no new run leaves them for the next one that loads runs.
    assert warehouse.update(Lake.at(lake_dir), path).mode == "up-to-date"
    # The next run lands, then updates.
    _land_run(lake_dir, at + timedelta(days=1))
    warehouse.update(Lake.at(lake_dir), path)
    con = warehouse.connect_read_only(path)
    try:
        rows = con.execute(
            "select phase, count(*) from marts.tool_cost where run_id = ? group by phase",
            [run_id],
        ).fetchall()
    finally:
        con.close()
    assert dict(rows) == {"start": 1, "measure": 1, "family": 1, "warehouse": 1, "rendering": 1}


@pytest.mark.e2e
@needs_tool("redis-benchmark")  # the throughput family's row: its tools' CPU kept apart
def test_a_real_run_lands_its_cost_and_reports_it(redis_server, tmp_path):
    """`yardstick run` (one shot, its own process) on a real server: every phase lands, the
    process's phases add up to at most its total, the report shows the table, and the
    warehouse keeps what the run loaded; a collection lands its few rows too."""
    from conftest import finish, open_warehouse, run_paths, start_yardstick, write_config

    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "scratch-a",
                "url": redis_server.url,
                "mode": "scratch",
                "families": ["fingerprint", "round_trip", "throughput", "slowlog"],
            }
        ],
    )
    args = ["--config", str(config), *run_paths(tmp_path)]
    done = finish(start_yardstick(tmp_path, "run", "--profile", "quick", *args), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = delta.read(Lake.at(tmp_path / "lake"), "tool_cost").to_pylist()
    nightly_run = rows[0]["run_id"]
    run_wide = {r["phase"]: r for r in rows if r["run_wide"]}
    assert set(run_wide) == {"start", "measure", "landing", "warehouse", "rendering", "total"}
    families = {r["family"] for r in rows if r["phase"] == "family"}
    assert families == {"fingerprint", "round_trip", "throughput", "slowlog"}
    assert {r["env"] for r in rows} == {"scratch-a"}
    assert all(r["cpu_s"] >= 0 and r["peak_rss_bytes"] > 0 for r in rows)
    assert all(r["prober_pid"] == rows[0]["prober_pid"] for r in rows)
    phases = sum(r["cpu_s"] for p, r in run_wide.items() if p != "total")
    assert phases <= run_wide["total"]["cpu_s"] + 1e-6
    assert run_wide["start"]["cpu_s"] > 0.1  # the process's imports are in it
    # redis-benchmark is the measurement's load, kept apart from the tool's own.
    throughput = next(r for r in rows if r["family"] == "throughput")
    assert throughput["children_cpu_s"] > throughput["cpu_s"]

    report = (tmp_path / "out" / "scratch-a.md").read_text()
    section = report.split("## The tool's own cost", 1)[1].split("\n## ", 1)[0]
    for shown in ("start:", "· throughput (scratch-a", "warehouse update (this run's"):
        assert shown in section, section
    assert "tool CPU ÷ measurement windows" in section

    con = open_warehouse(tmp_path / "w.duckdb")
    try:
        loaded = {r[0] for r in con.execute("select phase from marts.tool_cost").fetchall()}
    finally:
        con.close()
    assert loaded == {"start", "measure", "family", "landing"}

    lake_args = ["--lake", str(tmp_path / "lake"), "--state-dir", str(tmp_path / "state")]
    done = finish(start_yardstick(tmp_path, "collect", "--config", str(config), *lake_args))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = delta.read(Lake.at(tmp_path / "lake"), "tool_cost").to_pylist()
    collected = [r for r in rows if r["run_id"] != nightly_run]
    # One row per phase and family for the whole collection, none per environment.
    assert collected and all(r["run_wide"] for r in collected)
    assert {r["phase"] for r in collected} == {"start", "measure", "family", "landing", "total"}
