"""No number more precise than its instrument, and the host's load beside every family: floors
and resolutions said, small samples counted and flagged, dropped rounds counted, an empty key
space said, and a run on a saturated host named."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import lakes
import pytest
from conftest import needs_tool, open_warehouse
from test_slow_models import collection

from yardstick.flows.landing import record_run, run_family
from yardstick.host.embedded import RedisProcess
from yardstick.host.forwarder import Forwarder
from yardstick.settings.config import Environment
from yardstick.settings.profiles import PROFILES, TransportProfile
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.tasks import fingerprint, keyspace
from yardstick.tasks.base import RunContext, utc_now

# Report text from rows a real run made: the server's kind changes nothing tested here.
pytestmark = pytest.mark.server_agnostic

# A bounded busy loop: it ends by itself after a few seconds even if nobody kills it.
HOG = "import time; end = time.time() + 8\nwhile time.time() < end: pass"


def _hogged_run(env: Environment, lake_dir: Path) -> dict:
    """The fingerprint family run, landed with its run row, while more busy processes than
    cores spin (bounded: each ends by itself, and is killed once the family is done)."""
    profile, run_id = PROFILES["quick"], delta.new_run_id()
    # Started through a shell that exits at once: the hogs are not in the prober's own
    # process tree, whose threads (the measurement's own load) are not counted.
    hog = f"{sys.executable} -c '{HOG}' >/dev/null 2>&1 &"
    spawn = f"for i in $(seq {(os.cpu_count() or 1) + 1}); do {hog} done"
    started = subprocess.run(["sh", "-c", f"{spawn}; jobs -p"], capture_output=True, text=True)
    hogs = [int(pid) for pid in started.stdout.split()]
    try:
        time.sleep(1.0)  # every hog is running before the family starts
        started_at, start = utc_now(), time.perf_counter()
        step = run_family(
            fingerprint.FAMILY, env, profile, RunContext(), run_id, Lake.at(str(lake_dir)), None
        )
    finally:
        for pid in hogs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    record_run(env, profile, run_id, Lake.at(str(lake_dir)), "h", started_at, start, [step])
    return step


# --- one hand-made lake (and one real scan of an empty server), one build, many sections ----

AT = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)  # the collections' day: one period
ROUNDS = 3
REPS = [1020.0, 1030.0, 1200.0, 1010.0, 1040.0]  # outside timings of a 1,000 µs SORT


def _contention(run: lakes.Run) -> None:
    """A loop of 10 SORTs of 100 ms each, the victim getting only 8 PINGs in 5 windows."""
    run.write(
        "contention_setup",
        [
            {
                "list_len": 100_000,
                "slowlog_threshold_us": 10_000,
                "slowlog_max_len_used": 1024,
                "victim_client_name": "yardstick-victim",
                "culprit_client_name": "yardstick-culprit",
                "culprit_commands": 10,
                "loop_s": 1.0,
            }
        ],
    )
    windows = [("before", 0, 100, 50.0), ("after", 6, 100, 60.0)]
    windows += [("during", i + 1, n, 100_000.0 + 10_000 * i) for i, n in enumerate([1, 2, 1, 2, 2])]
    run.write(
        "contention_windows",
        [
            {
                "phase": phase,
                "window_idx": idx,
                "window_s": 0.2,
                "samples": n,
                "rtt_min_us": rtt / 2,
                "rtt_max_us": rtt * 1.5,
                "rtt_mean_us": rtt,
                "over_threshold": n if phase == "during" else 0,
            }
            for phase, idx, n, rtt in windows
        ],
    )
    run.write(
        "contention_counters",
        [
            {"phase": phase, "command": command, "calls": calls, "usec": usec}
            for phase, command, calls, usec in (
                ("before", "ping", 100, 100),
                ("after", "ping", 108, 108),
                ("before", "sort", 0, 0),
                ("after", "sort", 10, 1_000_000),
            )
        ],
    )


def _transport(run: lakes.Run) -> None:
    """Three rounds planned; the forwarded side's benchmark of round 2 was killed."""
    rows = []
    for rnd in range(ROUNDS):
        for side, rps, rtt in (("direct", 100_000.0, 50.0), ("forwarded", 50_000.0, 100.0)):
            killed = rnd == 1 and side == "forwarded"
            error = "redis-benchmark killed after 120 s" if killed else None
            rows.append(lakes.transport_side(rnd, side, None if killed else rps, rtt, error=error))
    run.write("transport", rows)
    params = json.dumps({"transport": {"rounds": ROUNDS}})
    lakes.steps(run, {"transport": None}, params=params, status="partial")


def _agreement(run: lakes.Run) -> None:
    """Five repetitions of one SORT; the third took 1.2x its SLOWLOG time from outside."""
    run.write(
        "agreement",
        [
            {
                "rep_idx": rep,
                "list_len": 100_000,
                "client_us": client_us,
                "entry_id": rep,
                "slowlog_us": 1000,
                "latency_ms": 1,
            }
            for rep, client_us in enumerate(REPS)
        ],
    )


@pytest.fixture(scope="module")
def built(prefect_server, tmp_path_factory) -> Iterator[duckdb.DuckDBPyConnection]:
    """The warehouse of one run per environment (floor, few, fwd, agree, hogged, empty) and
    of a day's SLOWLOG collections (burst)."""
    root = tmp_path_factory.mktemp("precision")
    lake_dir = root / "lake"
    for env, land in (
        ("floor", lambda run: lakes.latencystats(run, {50: 0.001, 99: 1.003, 99.9: 3.007})),
        ("few", _contention),
        ("fwd", _transport),
        ("agree", _agreement),
    ):
        run = lakes.new_run(lake_dir, env, AT)
        lakes.runs_row(run)
        land(run)
    # SLOWLOG collections every 5 minutes, 2 entries each, but one burst of 200 (max-len 128).
    ids = 0
    for n in range(12):
        logged = 200 if n == 6 else 2
        queued = list(range(ids, ids + logged))[-128:]
        ids += logged
        profile = "nightly" if n == 11 else "collect"
        run_id = collection(lake_dir, n, 5 * n, queued, env="burst", profile=profile)
    # The nightly run's fingerprint: Valkey 8.1.8, which answers redis_version 7.2.4.
    facts = {("server", "run_id"): "srv-a"}
    nightly = lakes.Run(lake_dir, "burst", run_id, AT)
    lakes.fingerprint(nightly, "7.2.4", product=("valkey", "8.1.8"), facts=facts)
    # A real server: fingerprinted under a CPU hog, then its empty key space scanned.
    server = RedisProcess().start()
    try:
        hogged = Environment(name="hogged", url=server.url, mode="scratch")
        assert _hogged_run(hogged, lake_dir)["status"] == "ok"
        env = Environment(name="empty", url=server.url, mode="read-only")
        measured = keyspace.keyspace(env, PROFILES["quick"].keyspace)
    finally:
        server.stop()
    run = lakes.new_run(lake_dir, "empty", AT)
    lakes.runs_row(run)
    for table, data in measured.tables.items():
        delta.write(Lake.at(lake_dir), table, "empty", run.run_id, data)
    warehouse.build(Lake.at(lake_dir), root / "w.duckdb")
    con = open_warehouse(root / "w.duckdb")
    yield con
    con.close()


def section(con: duckdb.DuckDBPyConnection, env: str, family: str) -> str:
    """One family's report section for the latest run of `env`."""
    from yardstick.reports.render import _jinja, environment_context

    run_id = con.execute("select max(run_id) from runs where env = ?", [env]).fetchone()[0]
    context = environment_context(con, {"run_id": run_id, "env": env})
    return _jinja().get_template(f"sections/{family}.md.j2").render(**context)


@pytest.mark.server_agnostic
def test_a_run_under_a_cpu_hog_is_flagged_saturated(built):
    """More busy processes than cores while a family ran: its load per core is above 1, the
    run is saturated, and its report names it."""
    from yardstick.reports.render import _jinja, environment_context, section_templates

    saturated, per_core, families, run_id = built.execute(
        "select saturated, load_per_core_max, saturated_families, run_id from run_load"
        " where env = 'hogged'"
    ).fetchone()
    assert saturated and per_core > 1 and families == "fingerprint", per_core
    run = built.execute("select * from runs where run_id = ?", [run_id]).fetchone()
    names = [d[0] for d in built.description]
    jinja = _jinja()
    context = environment_context(built, dict(zip(names, run, strict=True)))
    report = jinja.get_template("environment.md.j2").render(
        **context, sections=section_templates(jinja), member_of=None
    )
    assert "**Taken on a saturated host.** While fingerprint ran" in report
    assert "**This run was saturated**" in report and "saturated_load_per_core" in report


def test_a_latencystats_floor_is_never_printed_as_a_value(built):
    """p50=0.001 is INFO latencystats' floor (a call under 1 µs), not a 1 ns PING."""
    value = built.execute(
        "select value from figures where env = 'floor' and figure = 'server_ping_p50_us'"
    ).fetchone()[0]
    assert value < 1  # the figure keeps what the server said; the screens do not print it
    text = section(built, "floor", "round_trip")
    row = next(line for line in text.splitlines() if "`server_ping_p50_us`" in line)
    assert "< 1 µs, latencystats resolution" in row and "0.001" not in text
    assert "1.00 µs" in next(line for line in text.splitlines() if "`server_ping_p99_us`" in line)


def test_contention_with_few_pings_shows_n_and_the_low_sample_flag(built):
    low, n, windows, minimum = built.execute(
        "select low_sample, during_samples, during_windows, min_pings from contention_stats"
    ).fetchone()
    assert low and n < minimum and windows == 5
    text = section(built, "few", "contention")
    assert f"({n} PINGs in {windows} windows, pooled" in text
    assert f"**few samples**: fewer than {minimum} PINGs, the stated minimum" in text
    assert "the windows' median" in text


def test_a_dropped_transport_round_is_counted_in_the_text(built):
    text = section(built, "fwd", "transport")
    assert f"**2 of {ROUNDS} rounds complete.** 1 dropped (round 2;" in text
    assert "killed after 120 s" in text and "rest on 2 rounds" in text


def test_the_agreement_sentence_states_its_rule_and_names_the_failing_repetition(built):
    text = section(built, "agree", "agreement")
    assert "in every repetition, outside timing and LATENCY each within 10 %" in text
    assert f"fails in repetition 3 of {len(REPS)} (1.20× in repetition 3)" in text
    # The median that passes is printed as the median, not as the reason it failed.
    assert "The medians over repetitions are outside ÷ SLOWLOG 1.03×" in text


@pytest.mark.server_agnostic
def test_an_empty_key_space_has_nothing_to_scan(built):
    nothing, keys = built.execute(
        "select nothing_to_scan, keys_sampled from report_keyspace_scan"
    ).fetchone()
    assert nothing and keys == 0
    text = section(built, "empty", "keyspace")
    assert "**Nothing to scan:** database 0 held no keys" in text
    assert "over the budget" not in text and "n/a µs" not in text


@pytest.mark.server_agnostic
@needs_tool("redis-benchmark")
@needs_tool("socat")
def test_a_transport_round_whose_benchmark_is_killed_makes_the_step_partial(
    redis_server, tmp_path, monkeypatch
):
    """Round 2's benchmark runs far past its bound and is killed: its PINGs land, the step is
    partial and says "1 of 2 rounds", naming the round and why."""
    from yardstick.tasks import transport

    real = transport.run_cell

    def kill_round_2(tool, env, profile, cell, credentials=None):
        if cell["repetition"] == 1:
            profile = profile.model_copy(update={"requests": 50_000_000, "timeout_s": 0.3})
        return real(tool, env, profile, cell, credentials)

    monkeypatch.setattr(transport, "run_cell", kill_round_2)
    direct = Environment(name="direct", url=redis_server.url, mode="scratch")
    rounds = TransportProfile(rounds=2, requests=2_000, ping_window_s=0.2)
    profile = PROFILES["quick"].model_copy(update={"transport": rounds})
    with Forwarder(redis_server.port) as forwarder:
        fwd = Environment(
            name="fwd",
            url=forwarder.url,
            mode="scratch",
            same_server_as="direct",
            transport="port-forwarded",
        )
        context = RunContext(peers={"direct": direct})
        step = run_family(
            transport.FAMILY,
            fwd,
            profile,
            context,
            delta.new_run_id(),
            Lake.at(str(tmp_path)),
            None,
        )
    assert step["status"] == "partial", step
    assert step["reason"].startswith("1 of 2 rounds; dropped 1 (round 2): direct: "), step
    assert "killed" in step["reason"]


def test_a_slowlog_burst_is_told_from_an_interval_too_long(built):
    """Collections every 5 min are often enough for the average rate; the 72 entries lost
    came in one interval's burst, which a longer slowlog-max-len keeps, not a shorter interval."""
    text = section(built, "burst", "slowlog")
    assert (
        "often enough for the average rate, yet **72 entries were lost in 24 h in a burst**" in text
    )
    assert (
        "the busiest interval logged 200 entries (72 lost) where slowlog-max-len holds 128" in text
    )
    assert "too rarely" not in text
    # The server's own name and version, not the compatibility redis_version.
    named = built.execute(
        "select distinct server_product, server_version from slowlog_collection_gaps"
        " where env = 'burst'"
    ).fetchall()
    assert named == [("valkey", "8.1.8")]
