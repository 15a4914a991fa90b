"""The warehouse at the scale of its schedule: an incremental update gives what a full rebuild
gives, retention keeps the figures it drops the detail of, and the dbt project's own tests run."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
import redis
from conftest import open_warehouse

from yardstick.flows.collect import COLLECT_FAMILIES, collect_profile
from yardstick.flows.measure import measure_environment
from yardstick.settings.config import Environment
from yardstick.settings.profiles import KeyspaceProfile, RoundTripProfile, get_profile
from yardstick.storage import compaction, dbt, delta, retention, warehouse
from yardstick.storage.lakefs import Lake

# The servers here only produce runs: what is tested is the warehouse's updates.
pytestmark = pytest.mark.server_agnostic
pytestmark = [pytestmark, pytest.mark.e2e]

NIGHT_FAMILIES = ["fingerprint", "round_trip", "slowlog", "latency_monitor", "counters", "keyspace"]
# Tables the loader and dbt own, not figures: compared by other means.
NOT_COMPARED = ("figure_catalog",)  # a seed, beside the marts
REL_TOL = 1e-9


def _night_profile():
    """The quick profile, made shorter: two short PING windows, a small key-space scan."""
    return get_profile("quick").model_copy(
        update={
            "round_trip": RoundTripProfile(windows=2, window_s=0.2, interval_ms=0.5),
            "keyspace": KeyspaceProfile(max_keys=2_000, max_wall_s=10),
        }
    )


def _measure(lake_dir: Path, env: Environment, families: list[str], run_id: str, profile) -> None:
    """Land one environment's run through the flow's own task body (no flow run needed)."""
    outcome = measure_environment.fn(
        env, profile, run_id, Lake.at(lake_dir), "localhost", families=families
    )
    assert outcome.status == "ok", outcome.error


def _traffic(url: str, slow: int) -> None:
    """Some keys, and `slow` SLOWLOG entries, so every family has something to say."""
    client = redis.Redis.from_url(url)
    client.config_set("slowlog-log-slower-than", 0 if slow else 10_000_000)
    for i in range(slow):
        client.set(f"user:{i}", "x" * (10 + i))
    client.config_set("slowlog-log-slower-than", 10_000_000)


@pytest.fixture(scope="module")
def history(prefect_server, tmp_path_factory):
    """Three batches of nights and collections of two environments, landed one batch at a time;
    yields (lake, batches) where batches[i] is the lake after batch i (a copy)."""
    from yardstick.host.embedded import RedisProcess

    root = tmp_path_factory.mktemp("history")
    lake_dir = root / "lake"
    night, collect = _night_profile(), collect_profile()
    copies: list[Path] = []
    with RedisProcess() as a, RedisProcess() as b:
        envs = [
            Environment(name="alpha", url=a.url, mode="scratch"),
            Environment(name="beta", url=b.url, mode="read-only"),
        ]
        # Run ids a second apart, in landing order: two runs of one environment within the
        # same second would sort by their random suffix, and a later batch could hold an
        # "older" run (then the update rightly rebuilds instead of appending).
        first = datetime.now(UTC) - timedelta(hours=1)
        ids = (delta.new_run_id(first + timedelta(seconds=i)) for i in range(100))
        for batch in range(3):
            for step in range(3):
                for env, server in zip(envs, (a, b), strict=True):
                    _traffic(server.url, slow=step + batch)
                    if step == 1:
                        _measure(lake_dir, env, NIGHT_FAMILIES, next(ids), night)
                    else:
                        _measure(lake_dir, env, COLLECT_FAMILIES, next(ids), collect)
            if batch == 1:
                compaction.compact(
                    Lake.at(lake_dir)
                )  # the incremental path must read compacted files
            copies.append(Path(shutil.copytree(lake_dir, root / f"after-{batch}")))
    return copies


@pytest.fixture(scope="module")
def rebuilt(history, tmp_path_factory) -> Path:
    """One full build of the whole history, shared by the tests that only read it."""
    return warehouse.build(Lake.at(history[-1]), tmp_path_factory.mktemp("rebuilt") / "w.duckdb")


def _tables(path: Path) -> dict[str, list[tuple]]:
    """Every mart's rows, sorted, from a warehouse file."""
    con = open_warehouse(path)
    try:
        names = [
            r[0]
            for r in con.execute(
                "select table_name from information_schema.tables"
                " where table_type = 'BASE TABLE' and table_schema = 'marts' order by 1"
            ).fetchall()
        ]
        return {
            name: sorted(con.execute(f'select * from "{name}"').fetchall(), key=repr)
            for name in names
            if not name.startswith(NOT_COMPARED)
        }
    finally:
        con.close()


def _same(a, b) -> bool:
    """Equal, floats within REL_TOL (parallel sums may differ in the last bits)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL_TOL)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def assert_same_marts(got: dict[str, list[tuple]], want: dict[str, list[tuple]]) -> None:
    """Two warehouses' marts (from _tables) hold the same rows, floats within REL_TOL."""
    assert set(got) == set(want)
    for name in sorted(want):
        assert len(got[name]) == len(want[name]), name
        for mine, theirs in zip(got[name], want[name], strict=True):
            assert _same(mine, theirs), (name, mine, theirs)


def test_incremental_updates_equal_a_full_rebuild(history, rebuilt, tmp_path):
    incremental = tmp_path / "incremental.duckdb"
    results = [warehouse.update(Lake.at(copy), incremental) for copy in history]
    assert [r.mode for r in results] == ["full", "incremental", "incremental"], [
        r.reason for r in results
    ]
    # The update after the first (a rebuild: no warehouse yet) reuses the rebuild's dbt parse.
    assert "full parse" not in results[1].parse_mode, results[1].parse_mode
    # Nothing new: nothing to do.
    assert warehouse.update(Lake.at(history[-1]), incremental).mode == "up-to-date"
    got, want = _tables(incremental), _tables(rebuilt)
    assert {"figures", "figure_trends", "changes", "measures"} <= set(want)
    assert_same_marts(got, want)
    # The history is really there: every night of both environments has figures.
    con = open_warehouse(incremental)
    nights = con.execute("select env, count(distinct run_id) from figures group by env").fetchall()
    con.close()
    assert sorted(nights) == [("alpha", 3), ("beta", 3)]


def test_an_unfinished_update_of_an_earlier_version_makes_the_next_one_a_full_rebuild(
    history, tmp_path
):
    # An update of this version commits whole or not at all (tests/test_warehouse_resume.py
    # kills one and the next resumes); an earlier version committed model by model and left
    # state 'updating' when killed: its half-appended marts are rebuilt.
    target = tmp_path / "w.duckdb"
    warehouse.update(Lake.at(history[0]), target)
    con = duckdb.connect(str(target))
    con.execute(f"update {warehouse.META} set value = 'updating' where key = 'state'")
    con.close()
    result = warehouse.update(Lake.at(history[1]), target)
    assert result.mode == "full" and "earlier version" in result.reason

    # A WAL left by a killed writer of another file (issue 16): rebuilt from the lake, the WAL
    # removed, never a warehouse that no run or report can open.
    stale = tmp_path / "other.duckdb"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import duckdb, os, sys\n"
            "con = duckdb.connect(sys.argv[1])\n"
            "con.execute('PRAGMA disable_checkpoint_on_shutdown')\n"
            "con.execute(\"SET checkpoint_threshold = '1TB'\")\n"
            "con.execute('create table t as select range as i from range(100)')\n"
            "os._exit(9)\n",
            str(stale),
        ],
        check=False,
        timeout=60,
    )
    wal = target.with_name(target.name + ".wal")
    wal.write_bytes(stale.with_name(stale.name + ".wal").read_bytes())
    result = warehouse.update(Lake.at(history[1]), target)
    assert result.mode == "full" and "a stale w.duckdb.wal (not replayed)" in result.reason
    assert not wal.exists()
    open_warehouse(target).close()


def test_collections_are_not_figures(rebuilt):
    con = open_warehouse(rebuilt)
    try:
        profiles = {
            r[0]
            for r in con.execute(
                "select distinct r.profile from figures as f join runs as r using (run_id, env)"
            ).fetchall()
        }
        collections = con.execute(
            "select count(*) from runs where profile = 'collect'",
        ).fetchone()[0]
        gaps = con.execute("select count(*) from slowlog_collection_gaps").fetchone()[0]
    finally:
        con.close()
    assert "collect" not in profiles
    assert collections == 12 and gaps >= collections


def test_retention_drops_detail_and_keeps_the_figures(prefect_server, tmp_path):
    from yardstick.host.embedded import RedisProcess

    lake_dir, target = tmp_path / "lake", tmp_path / "w.duckdb"
    today = datetime.now(UTC).date()
    old_day = datetime.now(UTC) - timedelta(days=40)
    with RedisProcess() as server:
        env = Environment(name="gamma", url=server.url, mode="scratch")
        _traffic(server.url, slow=3)
        old_run = delta.new_run_id(old_day)
        _measure(lake_dir, env, NIGHT_FAMILIES, old_run, _night_profile())
        new_run = delta.new_run_id()
        _measure(lake_dir, env, NIGHT_FAMILIES, new_run, _night_profile())
    warehouse.update(Lake.at(lake_dir), target)
    query = (
        "select figure, subject, value from figures where run_id = ?"
        " and figure in ('rtt_client_p99_us', 'rtt_client_p50_us') or (run_id = ?"
        " and figure like 'ks_%') order by all"
    )

    def figures_of(path: Path) -> list[tuple]:
        con = open_warehouse(path)
        try:
            return con.execute(query, [old_run, old_run]).fetchall()
        finally:
            con.close()

    before = figures_of(target)
    assert any(f == "rtt_client_p99_us" for f, _, _ in before)
    assert any(f.startswith("ks_") for f, _, _ in before)

    report = retention.apply(Lake.at(lake_dir), target, detail_days=30, today=today)
    assert report.files_dropped == 2 and report.runs_retained == 1
    detail = delta.current_files(Lake.at(lake_dir), list(retention.DETAIL_FAMILIES))
    assert {f.runs[0] for f in detail} == {new_run}  # the recent run keeps its detail
    # The warehouse's detail views read the lake as it is now: the recent run's rows only.
    con = open_warehouse(target)
    kept = con.execute("select distinct run_id from keyspace_keys").fetchall()
    con.close()
    assert kept == [(new_run,)]
    assert delta.current_files(Lake.at(lake_dir), [retention.RETAINED])
    # Idempotent: nothing more to drop, nothing written twice.
    again = retention.apply(Lake.at(lake_dir), target, detail_days=30, today=today)
    assert again.files_dropped == 0 and again.rows_retained == 0

    # A rebuild from the lake alone still has the old run's percentiles and prefix figures.
    rebuilt = warehouse.build(Lake.at(lake_dir), tmp_path / "rebuilt.duckdb")
    after = figures_of(rebuilt)
    assert len(after) == len(before)
    for mine, theirs in zip(after, before, strict=True):
        assert _same(mine, theirs)


def test_dbt_tests_pass_on_a_real_warehouse(rebuilt):
    result = dbt.run(rebuilt, ["test"])
    kinds = {unique_id.split(".")[0] for unique_id, _, _ in result.nodes}
    assert "test" in kinds and "unit_test" in kinds
    assert all(status == "success" or status == "pass" for _, status, _ in result.nodes), [
        n for n in result.nodes if n[1] not in ("success", "pass")
    ]


def test_a_broken_model_is_one_line_naming_it_and_the_warehouse_survives(
    history, tmp_path, monkeypatch
):
    target = warehouse.build(Lake.at(history[0]), tmp_path / "w.duckdb")
    before = target.read_bytes()
    project = Path(shutil.copytree(dbt.project_dir(), tmp_path / "project"))
    (project / "models" / "marts" / "broken_figures.sql").write_text(
        "select * from no_such_table\n"
    )
    monkeypatch.setattr(dbt, "project_dir", lambda: project)
    with pytest.raises(dbt.ModelError) as failure:
        warehouse.update(Lake.at(history[-1]), target)
    message = str(failure.value)
    assert "broken_figures" in message and "\n" not in message
    assert target.read_bytes() == before


def _land_runs(lake_dir: Path, env: str, first: datetime, count: int) -> list[str]:
    """Land `count` bare collection runs (a runs row each), an hour apart."""
    from yardstick.storage.schemas import to_table

    run_ids = []
    for i in range(count):
        when = first + timedelta(hours=i)
        run_id = delta.new_run_id(when)
        row = {"profile": "collect", "started_at": when, "status": "ok"}
        delta.write(Lake.at(lake_dir), "runs", env, run_id, to_table("runs", [row]))
        run_ids.append(run_id)
    return run_ids


def _loaded_runs(path: Path) -> list[str]:
    con = open_warehouse(path)
    try:
        return [r for (r,) in con.execute("select run_id from runs order by run_id").fetchall()]
    finally:
        con.close()


def test_runs_held_back_load_next_time_and_leftovers_are_not_doubled(tmp_path):
    lake_dir, target = tmp_path / "lake", tmp_path / "w.duckdb"
    first = datetime(2026, 11, 2, tzinfo=UTC)
    runs = _land_runs(lake_dir, "e", first, 3)
    # The nightly run loads only runs started before it: the third waits for the next update.
    warehouse.update(Lake.at(lake_dir), target, until_run_id=runs[1])
    assert _loaded_runs(target) == runs[:2]
    compaction.compact(Lake.at(lake_dir))  # the held-back run now sits in a file already seen
    runs += _land_runs(lake_dir, "e", first + timedelta(hours=5), 1)
    result = warehouse.update(Lake.at(lake_dir), target)
    assert result.mode == "incremental" and result.runs_added == 2
    assert _loaded_runs(target) == runs
    # The files a compaction replaced stay on disk for an hour (readers that listed them just
    # before still find them): never read twice, since no current version names them.
    runs += _land_runs(lake_dir, "e", first + timedelta(hours=7), 1)
    compaction.compact(Lake.at(lake_dir))
    on_disk = [p for p in (lake_dir / "runs").rglob("*.parquet") if "_delta_log" not in p.parts]
    assert len(on_disk) > len(delta.data_files(Lake.at(lake_dir), "runs")) == 1
    assert warehouse.update(Lake.at(lake_dir), target).runs_added == 1
    assert _loaded_runs(target) == runs


def test_a_rebuild_in_monthly_batches_equals_one_batch(history, rebuilt, tmp_path, monkeypatch):
    # Bounded batches (a period, at most REBUILD_BATCH_RUNS runs) build what one batch builds.
    monkeypatch.setattr(warehouse, "REBUILD_BATCH_RUNS", 5)
    result = warehouse.update(Lake.at(history[-1]), tmp_path / "batched.duckdb", full=True)
    assert result.mode == "full" and result.batches >= 3
    assert_same_marts(_tables(result.path), _tables(rebuilt))
    assert _files(tmp_path) == ["batched.duckdb"]  # the building folder is gone


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _lake_rows(lake_dir: Path, table: str) -> int:
    """Rows of one detail table in the lake's files (read without the tool's views)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in lake_dir.glob(f"{table}/*/*/*.parquet"))


def test_detail_stays_in_the_lake_and_is_read_where_it_lies(history, rebuilt):
    con = open_warehouse(rebuilt)
    try:
        kinds = dict(
            con.execute(
                "select table_name, table_type from information_schema.tables"
                " where table_name in ('raw_keyspace_keys', 'raw_ping_histogram',"
                " 'keyspace_keys', 'ping_histogram')"
            ).fetchall()
        )
        # No table of the warehouse holds a per-key or per-bucket row.
        copies = con.execute(
            "select table_name from information_schema.columns as c"
            " join information_schema.tables as t using (table_schema, table_name)"
            " where t.table_type = 'BASE TABLE' and table_schema not in ('yardstick', 'raw')"
            # yardstick: the typed empty detail tables; raw: one batch's rows (views for detail)
            # The report's biggest keys: top_keys per scan and ranking whatever the key space
            # (bounded below), not a copy of it.
            " and table_name <> 'keyspace_top_keys'"
            " group by table_name having count(*) filter (column_name in"
            " ('key', 'memory_usage_bytes')) = 2 or count(*) filter (column_name in"
            " ('bucket', 'low_us')) = 2"
        ).fetchall()
        counts = {
            table: con.execute(f"select count(*) from {table}").fetchone()[0]
            for table in ("keyspace_keys", "ping_histogram")
        }
        envs = {r[0] for r in con.execute("select distinct env from keyspace_keys").fetchall()}
        # Each scan's ranking holds at most top_keys rows (the profile's, 10 by default).
        top_most = con.execute(
            "select coalesce(max(n), 0) from (select count(*) as n from keyspace_top_keys"
            " group by run_id, env, ranked_by)"
        ).fetchone()[0]
    finally:
        con.close()
    assert kinds == dict.fromkeys(
        ["raw_keyspace_keys", "raw_ping_histogram", "keyspace_keys", "ping_histogram"], "VIEW"
    )
    assert copies == []
    assert top_most <= 10
    for table, count in counts.items():
        assert count == _lake_rows(history[-1], table) > 0, table
    assert envs == {"alpha", "beta"}


def test_two_warehouses_of_one_name_in_two_folders_do_not_wait_on_each_other(history, tmp_path):
    # Another process holds every lock of one warehouse (its update's and its dbt state's)
    # for minutes: the same-named warehouse in another folder updates meanwhile.
    first = tmp_path / "one" / "warehouse.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from yardstick.storage import dbt\n"
            "path = Path(sys.argv[1])\n"
            "with dbt.locked(path), dbt._exclusive(dbt.state_dir(path)):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(600)\n",
            str(first),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        second = tmp_path / "two" / "warehouse.duckdb"
        assert dbt.state_dir(second) != dbt.state_dir(first)
        assert warehouse.update(Lake.at(history[0]), second).mode == "full"
        assert holder.poll() is None  # still holding: the update did not wait for it
    finally:
        holder.kill()
        holder.wait()
