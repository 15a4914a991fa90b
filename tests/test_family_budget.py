"""A family bound is a budget, and finished measurement always lands: a family stopped by its
bound or by a stop request lands the cells, repetitions and windows it finished, its step says
"N of M", and the next family runs. Real redis-server and redis-benchmark processes, through
the nightly flow's own tasks."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from conftest import needs_tool, open_warehouse
from prefect import flow
from prefect.utilities.annotations import quote

from yardstick import interrupt
from yardstick.flows.landing import record_run, run_family
from yardstick.flows.measure import measure_environment
from yardstick.flows.nightly import render, update_warehouse
from yardstick.settings.config import Environment
from yardstick.settings.profiles import PROFILES, Profile
from yardstick.storage import delta
from yardstick.storage.lakefs import Lake
from yardstick.tasks import base
from yardstick.tasks.base import Family, Measured, RunContext, rows_to_table
from yardstick.tasks.memory import MemoryProfile, MemoryShape
from yardstick.tasks.throughput import PILOT_MIN_REQUESTS, TABLES, ThroughputProfile

# The budget and what lands are the same whatever the server kind (the cluster tests run 6.2).
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.server_agnostic,
    pytest.mark.usefixtures("prefect_server"),
]
needs_benchmark = needs_tool("redis-benchmark")

# 200 cells of 5,000 single-client SETs each: at least ~0.1 s a cell on any loopback (one
# round trip each), so 20 s or more in all, far past the bounds below; the first cell starts
# whatever the bound (nothing is known of its duration yet) and takes well under them.
CELLS = ThroughputProfile(
    clients=[1],
    pipelines=[1],
    payloads_bytes=[3, 100],
    tests=["set"],
    requests=5_000,
    repetitions=100,
)
PLANNED = 2 * 100
# The next family: a small memory-by-difference measurement.
SMALL_MEMORY = MemoryProfile(
    shapes=[MemoryShape(name="string", type="string", key_count=2_000)], repetitions=3
)


def _profile(**settings) -> Profile:
    """The quick profile with these families' settings replaced."""
    return PROFILES["quick"].model_copy(update=settings)


@flow(name="family-budget-test")
def budget_flow(
    env: Environment,
    profile: Profile,
    families: list[str],
    lake_dir: str,
    warehouse_path: str,
    out_dir: str,
    build: bool = True,
):
    """Measure `families` on one environment, then build the warehouse and the reports."""
    run_id = delta.new_run_id()
    outcome = measure_environment(
        env, quote(profile), run_id, Lake.at(lake_dir), "localhost", families=families
    )
    if build:
        update_warehouse(Lake.at(lake_dir), warehouse_path)
        render(warehouse_path, out_dir, run_id)
    return run_id, outcome


def _run(tmp_path: Path, env: Environment, profile: Profile, families: list[str]):
    """Run the flow into tmp_path: (run id, outcome, open warehouse)."""
    run_id, outcome = budget_flow(
        env,
        profile,
        families,
        str(tmp_path / "lake"),
        str(tmp_path / "w.duckdb"),
        str(tmp_path / "out"),
    )
    return run_id, outcome, open_warehouse(tmp_path / "w.duckdb")


def _steps(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, tuple[str, str]]:
    """family -> (status, reason) of the run's steps."""
    rows = con.execute(
        "select family, status, reason from steps where run_id = ? and env = 'scratch'",
        [run_id],
    ).fetchall()
    return {family: (status, reason or "") for family, status, reason in rows}


def _landed(tmp_path: Path, table: str, lake_dir: str = "lake") -> list[dict]:
    """The rows of one lake table, as landed (Parquet under lake/<table>/env=scratch/)."""
    files = sorted((tmp_path / lake_dir / table).glob("env=scratch/**/*.parquet"))
    assert files, f"nothing landed under {lake_dir}/{table}/env=scratch"
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()


def _cells_done(reason: str, unit: str, planned: int) -> int:
    """N of "N of M <unit>" in a step's reason."""
    found = re.search(rf"(\d+) of {planned} {unit}", reason)
    assert found, reason
    return int(found.group(1))


@needs_benchmark
def test_a_throughput_bound_that_ends_it_halfway_lands_the_finished_cells(redis_server, tmp_path):
    env = Environment(
        name="scratch", url=redis_server.url, mode="scratch", family_timeouts_s={"throughput": 6}
    )
    profile = _profile(throughput=CELLS, memory=SMALL_MEMORY)
    run_id, outcome, con = _run(tmp_path, env, profile, ["throughput", "memory"])

    steps = _steps(con, run_id)
    status, reason = steps["throughput"]
    assert status == "partial", reason
    done = _cells_done(reason, "cells", PLANNED)
    assert 1 <= done < PLANNED
    # The budget stopped it (the usual way), or a cell ran far past its estimate and was cut.
    assert "would not finish within the 6 s bound" in reason or reason.startswith("timed out")
    # The next family ran, and the run says it is partial, not ok.
    assert steps["memory"][0] == "ok", steps["memory"]
    assert outcome.status == "partial" and "throughput" in (outcome.error or "")
    assert redis.Redis(port=redis_server.port, db=15).dbsize() == 0

    # Every finished cell is in the lake (one row each: one test a cell), whole and ok.
    rows = _landed(tmp_path, "benchmark")
    # The finished cells' rows, and the cut cell's (interrupted, never a figure) when the
    # request came while a cell ran.
    assert sum(r["status"] == "ok" for r in rows) == done
    assert all(r["status"] in ("ok", "interrupted") for r in rows)
    assert _landed(tmp_path, "memory_loads")

    # ... and in the figures, each cell's n being the repetitions it finished (a stalled one
    # is counted beside it).
    cells = con.execute(
        "select cell, n, coalesce(stalled_repetitions, 0) from report_throughput_matrix "
        "where run_id = ?",
        [run_id],
    ).fetchall()
    assert {c for c, _, _ in cells} <= {"set c1 P1 3B", "set c1 P1 100B"}
    assert sum(n + stalled for _, n, stalled in cells) == done
    rps = con.execute(
        "select count(*) from figures where run_id = ? and figure = 'bench_rps'", [run_id]
    ).fetchone()[0]
    assert rps == len(cells)

    report = (tmp_path / "out" / "scratch.md").read_text()
    assert "**Not the whole matrix** (partial)" in report
    assert f"{done} of {PLANNED} cells" in report


@needs_benchmark
def test_a_stop_request_mid_throughput_lands_the_finished_cells(redis_server, tmp_path):
    env = Environment(name="scratch", url=redis_server.url, mode="scratch")
    profile = _profile(throughput=CELLS, memory=SMALL_MEMORY)
    server = redis.Redis(port=redis_server.port)

    def sets() -> int:
        return int(server.info("commandstats").get("cmdstat_set", {}).get("calls", 0))

    def stop_after_two_cells() -> None:
        # Two cells' SETs, the first cell's pilot's and one more: two cells have finished (a
        # cell's rows are handed over before the next cell's redis-benchmark starts).
        deadline = time.monotonic() + 240
        while sets() <= 2 * CELLS.requests + PILOT_MIN_REQUESTS and time.monotonic() < deadline:
            time.sleep(0.02)
        interrupt.request_stop("a test's stop request")

    stopper = threading.Thread(target=stop_after_two_cells, daemon=True)
    stopper.start()
    try:
        # Stopped, a run lands and leaves; the warehouse is built by the next one.
        _, outcome = budget_flow(
            env, profile, ["throughput", "memory"], str(tmp_path / "lake"), "", "", build=False
        )
    finally:
        stopper.join()
        interrupt.reset()

    steps = {r["family"]: (r["status"], r["reason"] or "") for r in _landed(tmp_path, "steps")}
    status, reason = steps["throughput"]
    assert status == "interrupted", reason
    assert reason.startswith("interrupted: a test's stop request; landed ")
    done = _cells_done(reason, "cells", PLANNED)
    assert 2 <= done < PLANNED
    assert steps["memory"][0] == "skipped" and "not attempted" in steps["memory"][1]
    assert outcome.status == "interrupted"
    rows = _landed(tmp_path, "benchmark")
    # The finished cells' rows, and the cut cell's (interrupted, never a figure) when the
    # request came while a cell ran.
    assert sum(r["status"] == "ok" for r in rows) == done
    assert all(r["status"] in ("ok", "interrupted") for r in rows)
    # Its own cleanup ran: the benchmark database is empty again.
    assert redis.Redis(port=redis_server.port, db=15).dbsize() == 0


def test_a_memory_bound_lands_the_finished_repetitions(redis_server, tmp_path):
    env = Environment(
        name="scratch", url=redis_server.url, mode="scratch", family_timeouts_s={"memory": 8}
    )
    # Hundreds of repetitions of 20,000 keys: each several tenths of a second (the settle
    # waits alone), far more than 8 s in all.
    memory = MemoryProfile(
        shapes=[MemoryShape(name="string", type="string", key_count=20_000)], repetitions=300
    )
    run_id, outcome, con = _run(tmp_path, env, _profile(memory=memory), ["memory"])

    status, reason = _steps(con, run_id)["memory"]
    assert status == "partial", reason
    done = _cells_done(reason, "repetitions", 300)
    assert 1 <= done < 300
    assert "would not finish within the 8 s bound" in reason or reason.startswith("timed out")
    assert outcome.status == "partial"
    loads = _landed(tmp_path, "memory_loads")
    assert len(loads) == done
    # Each landed repetition is whole: its three readings (and the settle one) are there.
    readings = _landed(tmp_path, "memory_readings")
    assert {(r["repetition"], r["phase"]) for r in readings} == {
        (rep, phase) for rep in range(done) for phase in ("settle", "before", "after", "removed")
    }
    n = con.execute(
        "select n from figures where run_id = ? and figure = 'mem_bytes_per_key' "
        "and subject like '%string%'",
        [run_id],
    ).fetchall()
    assert n and all(value == done for (value,) in n), n
    assert redis.Redis(port=redis_server.port).dbsize() == 0


# --- the mechanism alone: a unit cut at the bound --------------------------------------------

# Lands into a table the lake knows (any would do): one row per thing.
THINGS = TABLES["benchmark"]


def _two_then_hang(planned: int) -> Measured:
    """Finish two things, then wait past any bound in the third."""
    rows: list[dict] = []
    progress = base.progress()
    progress.plan(planned, "things")
    for idx in range(planned):
        if idx == 2:
            interrupt.sleep(600)  # the bound ends it here: this thing is never finished
        rows.append({"repetition": idx})
        count = len(rows)
        progress.finished(lambda count=count: Measured({"benchmark": _things(rows[:count])}, 0.5))
    return Measured({"benchmark": _things(rows)})


def _things(rows: list[dict]) -> pa.Table:
    return rows_to_table("benchmark", THINGS, rows)


FAKE = Family(
    name="things",
    phase="load",
    measure=_two_then_hang,
    task_name="fake-things",
    arguments=lambda env, profile, ctx: (5,),
    tables={"benchmark": THINGS},
)


def test_a_unit_cut_at_the_bound_is_left_out_and_the_finished_ones_land(tmp_path):
    env = Environment(
        name="scratch", url="redis://localhost:1/0", mode="scratch", family_timeouts_s={"things": 1}
    )
    profile = PROFILES["quick"]
    steps = []
    for plain in (True, False):  # the 5-minute collection's way, and a Prefect task run
        run_id = delta.new_run_id()
        step = run_family(
            FAKE, env, profile, RunContext(), run_id, Lake.at(str(tmp_path)), None, plain
        )
        assert step["status"] == "partial", step
        assert step["reason"] == "timed out: things stopped at its 1 s bound; landed 2 of 5 things"
        assert step["window_s"] == 0.5
        steps.append(step)
    landed = _landed(tmp_path, "benchmark", lake_dir=".")
    assert sorted(r["repetition"] for r in landed) == [0, 0, 1, 1]
    outcome = record_run(
        env, profile, run_id, Lake.at(str(tmp_path)), "h", base.utc_now(), 0.0, steps
    )
    assert outcome.status == "partial" and "landed 2 of 5 things" in outcome.error


def test_memtier_starts_no_run_that_cannot_finish_in_its_bound(redis_server, tmp_path, monkeypatch):
    from test_latency_throughput import fake_memtier

    from yardstick.tasks.memtier import MemtierProfile, memtier

    fake_memtier(tmp_path, monkeypatch)  # memtier_benchmark is not packaged: a stand-in script
    env = Environment(name="scratch", url=redis_server.url, mode="scratch")
    # A run lasts its 2 s test time at least: none fits in 3 s with the margin and reserve.
    with base.tracking_progress() as progress, interrupt.bounded("memtier", 3):
        measured = memtier(env, MemtierProfile(repetitions=3, test_time_s=2))
    assert measured.tables["memtier"].num_rows == 0
    assert progress.summary() == (
        "0 of 3 repetitions; skipped 3 (run ×3): would not finish within the 3 s bound"
    )
    # Unbounded, every run is started.
    with base.tracking_progress() as progress:
        measured = memtier(env, MemtierProfile(repetitions=3, test_time_s=2))
    assert progress.summary() == "3 of 3 repetitions" and not progress.partial


# A redis-benchmark stand-in at a steady 2,000 requests/s (a loaded host, every time): the
# size of the first cell, not the machine's mood, decides what fits.
SLOW_BENCHMARK = """#!{python}
import sys, time
args = sys.argv[1:]
requests = int(args[args.index("-n") + 1])
tests = args[args.index("-t") + 1].split(",")
time.sleep(requests * len(tests) / 2000)
print('"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"')
for test in tests:
    print(f'"{{test.upper()}}","2000.00","0.5","0.1","0.5","0.9","1.0","2.0"')
"""


def test_a_first_cell_too_big_for_a_tight_bound_is_shrunk_and_lands(
    redis_server, tmp_path, monkeypatch
):
    import sys

    import yardstick.tasks.throughput as throughput_task
    from yardstick.host.tools import Tool

    path = tmp_path / "redis-benchmark"
    path.write_text(SLOW_BENCHMARK.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setattr(
        throughput_task,
        "find_tool",
        lambda name: Tool(name=name, path=str(path), version=(7, 0, 15)),
    )
    env = Environment(name="scratch", url=redis_server.url, mode="scratch")
    # The full first cell: 20,000 SETs, 10 s at 2,000/s, far past a 6 s bound; its pilot of
    # 2,000 takes 1 s.
    cells = ThroughputProfile(
        clients=[1],
        pipelines=[1],
        payloads_bytes=[3],
        tests=["set"],
        requests=20_000,
        repetitions=3,
    )
    with base.tracking_progress() as progress, interrupt.bounded("throughput", 6):
        measured = throughput_task.throughput(env, cells)
    rows = measured.tables["benchmark"].to_pylist()
    assert [(r["status"], r["requests"]) for r in rows] == [("ok", 2_000)]  # its size, stated
    assert progress.done == 1 and progress.partial
    assert measured.notes == [
        "c1 P1 3B repetition 1 ran 2,000 requests per test, not 20,000: at its pilot's rate "
        "the full cell would not finish within the 6 s bound"
    ]
    # Given room, the pilot says the full cell fits, and every cell runs at its full size.
    with base.tracking_progress() as progress, interrupt.bounded("throughput", 60):
        measured = throughput_task.throughput(env, cells.model_copy(update={"requests": 4_000}))
    rows = measured.tables["benchmark"].to_pylist()
    assert [r["requests"] for r in rows] == [4_000] * 3 and not measured.notes
