"""The SQL models on hand-made lake rows: losses net of the tool's experiments, the collection
interval recommendation, and commandstats intervals (reset and restart left out)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from conftest import open_warehouse

from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def land(lake_dir, table: str, run_id: str, rows: list[dict], env: str = "e") -> None:
    """Write hand-made rows of one table for one run."""
    delta.write(Lake.at(lake_dir), table, env, run_id, to_table(table, rows))


def land_run(lake_dir, run_id: str, at: datetime, profile: str, env: str = "e") -> None:
    """The run's `runs` row: the warehouse loads only runs that have one."""
    land(lake_dir, "runs", run_id, [{"profile": profile, "started_at": at, "status": "ok"}], env)


def collection(
    lake_dir,
    n: int,
    minutes: float,
    ids: list[int],
    server: str = "srv-a",
    max_len: int = 128,
    env: str = "e",
    profile: str = "collect",
) -> str:
    """Land collection number `n`, taken `minutes` after T0, that read entries `ids` (a
    nightly run reads the SLOWLOG the same way: profile="nightly")."""
    run_id = f"20261129T10{n:02d}00Z-00000{n}"
    at = T0 + timedelta(minutes=minutes)
    land_run(lake_dir, run_id, at, profile, env)
    land(
        lake_dir,
        "slowlog_collections",
        run_id,
        [
            {
                "server_run_id": server,
                "redis_version": "7.0.15",
                "uptime_s": 100,
                "collected_at": at,
                "slowlog_len": len(ids),
                "slowlog_max_len": max_len,
                "log_slower_than_us": 10000,
                "count_requested": -1,
                "entries_returned": len(ids),
                "args_redacted": True,
                "tool_client_prefix": "yardstick",
                "read_s": 0.001,
            }
        ],
        env,
    )
    land(
        lake_dir,
        "slowlog_entries",
        run_id,
        [
            {
                "server_run_id": server,
                "entry_id": i,
                "logged_at": at,
                "duration_us": 20000,
                "command": "keys",
                "args": ["KEYS", "*"],
                "args_redacted": True,
                "arg_count": 2,
                "client_name": "yardstick-keyspace" if i % 2 else "app",
                "entry_fields": 6,
            }
            for i in ids
        ],
        env,
    )
    return run_id


def build(tmp_path) -> duckdb.DuckDBPyConnection:
    """Build the warehouse from the hand-made lake."""
    return open_warehouse(warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb"))


def test_interval_recommended_from_entry_rate_and_max_len(tmp_path):
    lake_dir = tmp_path / "lake"
    # 64 ids every 5 minutes: 12.8 entries/min; 128 entries fill in 10 min.
    for n in range(4):
        last = collection(
            lake_dir,
            n,
            5 * n,
            list(range(64 * n, 64 * n + 64))[-128:],
            profile="nightly" if n == 3 else "collect",
        )
    con = build(tmp_path)
    rate = con.execute(
        "select entries_per_min, fill_min, recommended_interval_min, median_gap_s, lost_24h "
        "from slowlog_rates where run_id = ?",
        [last],
    ).fetchone()
    assert rate == pytest.approx((12.8, 10.0, 5.0, 300.0, 0))
    tool_share = con.execute(
        "select value from figures where run_id = ? and figure = 'slowlog_tool_share'", [last]
    ).fetchone()[0]
    assert tool_share == pytest.approx(0.5)  # odd ids came from a yardstick-* connection
    # Collections are not figures: their facts stay in the slowlog marts.
    figure_runs = {r[0] for r in con.execute("select distinct run_id from figures").fetchall()}
    assert figure_runs == {last}
    assert con.execute("select count(*) from slowlog_rates").fetchone()[0] == 4


def test_ids_of_the_tools_experiments_are_not_counted_as_lost(tmp_path):
    lake_dir = tmp_path / "lake"
    collection(lake_dir, 1, 0, [0, 1, 2])
    # An experiment on the same server (landed by another environment) used ids 3..102.
    land_run(lake_dir, "20261129T100100Z-0000ff", T0, "nightly", env="other-env-same-server")
    land(
        lake_dir,
        "contention_span",
        "20261129T100100Z-0000ff",
        [
            {
                "family": "contention",
                "server_run_id": "srv-a",
                "started_at": T0,
                "finished_at": T0 + timedelta(seconds=5),
                "first_entry_id": 3,
                "last_entry_id": 102,
            }
        ],
        env="other-env-same-server",
    )
    # Ids 103 and 104 were the application's and were pushed out: two real losses.
    last = collection(lake_dir, 2, 5, list(range(105, 105 + 128)))
    con = build(tmp_path)
    lost, experiment_ids, logged = con.execute(
        "select lost_entries, lost_experiment_ids, ids_logged from slowlog_collection_gaps "
        "where run_id = ?",
        [last],
    ).fetchone()
    assert (lost, experiment_ids) == (2, 100)
    assert logged == 232 - 2 - 100  # the rate leaves the experiment's burst out too


def test_restart_and_reset_intervals_are_left_out_of_counters(tmp_path):
    lake_dir = tmp_path / "lake"

    def snapshot(n: int, minutes: float, server: str, calls: dict[str, int]) -> str:
        run_id = f"20261129T11{n:02d}00Z-00000{n}"
        # Measurement runs snapshot commandstats too; their intervals are figures.
        land_run(lake_dir, run_id, T0 + timedelta(minutes=minutes), "nightly")
        land(
            lake_dir,
            "commandstats_snapshots",
            run_id,
            [
                {
                    "server_run_id": server,
                    "uptime_s": 10,
                    "taken_at": T0 + timedelta(minutes=minutes),
                    "command": command,
                    "calls": count,
                    "usec": count * 3,
                    "rejected_calls": 0,
                    "failed_calls": 0,
                }
                for command, count in calls.items()
            ],
        )
        return run_id

    snapshot(1, 0, "srv-a", {"get": 100})
    normal = snapshot(2, 10, "srv-a", {"get": 700, "set": 60})
    reset = snapshot(3, 20, "srv-a", {"get": 5})  # CONFIG RESETSTAT by someone
    restarted = snapshot(4, 30, "srv-b", {"get": 50})  # new server run: a new series
    con = build(tmp_path)
    values = dict(
        con.execute(
            "select subject || ':' || figure, value from figures where run_id = ?", [normal]
        ).fetchall()
    )
    assert values[":server_calls_per_s"] == pytest.approx(660 / 600)
    assert values["get:command_calls_per_s"] == pytest.approx(1.0)
    assert values["set:command_usec_per_call"] == pytest.approx(3.0)
    assert values[":server_busy_share"] == pytest.approx(660 * 3 / 600e6)
    for run_id in (reset, restarted):
        assert (
            con.execute(
                "select count(*) from figures where run_id = ? and family = 'counters'", [run_id]
            ).fetchone()[0]
            == 0
        )
