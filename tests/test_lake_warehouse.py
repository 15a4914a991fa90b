"""The lake is append-only and atomic; the warehouse is rebuilt from it alone, atomically."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import lakes
import pyarrow as pa
import pytest
from conftest import open_warehouse

from yardstick.host.embedded import RedisProcess
from yardstick.settings.config import Environment
from yardstick.settings.profiles import RoundTripProfile
from yardstick.storage import dbt, delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import SCHEMA_VERSION, TABLES, to_table
from yardstick.tasks.fingerprint import fingerprint
from yardstick.tasks.round_trip import round_trip

ENV = "lake-test"


def _land_run(lake_dir: Path, env: Environment) -> str:
    """Measure a real server (fingerprint and a short round trip) and land it as a run, its
    runs and steps rows from the shared lake factory (tests/lakes.py)."""
    run = lakes.new_run(lake_dir, env.name, datetime.now(UTC))
    measured = [
        fingerprint(env, None),
        round_trip(env, RoundTripProfile(windows=2, window_s=0.2, interval_ms=0.5)),
    ]
    for result in measured:
        for table, data in result.tables.items():
            delta.write(Lake.at(lake_dir), table, env.name, run.run_id, data)
    lakes.steps(run, ["fingerprint", "round_trip"], finished_at=run.at, duration_s=0.5)
    lakes.runs_row(
        run, profile="test", url=env.url_redacted, host_group="localhost", tool_version="test"
    )
    return run.run_id


@pytest.fixture(scope="module")
def measured_lake(tmp_path_factory) -> Path:
    """A lake holding two real runs of one environment (no Prefect involved)."""
    lake_dir = tmp_path_factory.mktemp("measured") / "lake"
    with RedisProcess() as server:
        env = Environment(name=ENV, url=server.url, mode="scratch")
        _land_run(lake_dir, env)
        _land_run(lake_dir, env)
    return lake_dir


@pytest.fixture
def lake_copy(measured_lake, tmp_path) -> Path:
    return Path(shutil.copytree(measured_lake, tmp_path / "lake"))


def _figures(path: Path) -> list[tuple]:
    con = open_warehouse(path)
    try:
        return sorted(con.execute("select * from figures").fetchall(), key=repr)
    finally:
        con.close()


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_two_rebuilds_from_the_same_lake_give_identical_figures(lake_copy, tmp_path):
    first = _figures(warehouse.build(Lake.at(lake_copy), tmp_path / "one.duckdb"))
    second = _figures(warehouse.build(Lake.at(lake_copy), tmp_path / "two.duckdb"))
    assert len(first) >= 2 * 8  # two runs, every round-trip figure
    assert first == second
    # Rebuilding in place gives the same again, and leaves only the warehouse behind.
    third = _figures(warehouse.build(Lake.at(lake_copy), tmp_path / "one.duckdb"))
    assert third == first
    assert _files(tmp_path) == ["lake", "one.duckdb", "two.duckdb"]


def test_every_lake_table_is_a_delta_table_partitioned_by_env_and_period(measured_lake):
    from deltalake import DeltaTable

    tables = {p.name for p in measured_lake.iterdir() if (p / "_delta_log").is_dir()}
    assert tables >= {"runs", "steps", "fingerprint", "ping_windows"}
    for table in tables:
        dt = DeltaTable(str(measured_lake / table))
        assert dt.metadata().partition_columns == ["env", "period"]
        data = dt.to_pyarrow_table()
        assert data.column_names[:2] == ["run_id", "schema_version"]
        assert set(data["schema_version"].to_pylist()) == {SCHEMA_VERSION}
        assert set(data["env"].to_pylist()) == {ENV}
        assert {delta.run_period(r) for r in data["run_id"].to_pylist()} == set(
            data["period"].to_pylist()
        )
        # The log stays small: checkpoints, not a commit per row.
        assert dt.metadata().configuration["delta.checkpointInterval"] == "50"


def _old_runs_table(lake_dir: Path, run_id: str, columns: list, values: dict) -> None:
    """A runs table as an older version of the tool wrote it (fewer columns), by hand."""
    from deltalake import write_deltalake

    row = {f.name: values.get(f.name) for f in columns}
    schema = pa.schema(
        [("run_id", pa.string()), ("schema_version", pa.int16()), *columns]
        + [("env", pa.string()), ("period", pa.string())]
    )
    old = pa.Table.from_pylist(
        [
            {
                "run_id": run_id,
                "schema_version": 0,
                **row,
                "env": "legacy",
                "period": delta.run_period(run_id),
            }
        ],
        schema=schema,
    )
    write_deltalake(str(lake_dir / "runs"), old, partition_by=["env", "period"], mode="append")


def test_an_older_table_lacking_a_column_loads_with_that_column_null(tmp_path, measured_lake):
    # A runs table from before `host_group` and `tool_version` existed, then today's runs.
    lake_dir = tmp_path / "lake"
    old_run = "20250102T030405Z-0ld0ld"
    columns = [f for f in TABLES["runs"] if f.name not in ("host_group", "tool_version")]
    started = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    values = {
        "profile": "nightly",
        "started_at": started,
        "finished_at": started,
        "duration_s": 9.5,
        "status": "ok",
        "mode": "scratch",
        "transport": "direct",
        "url": "redis://127.0.0.1:6379/0",
        "prober_on_host": True,
    }
    _old_runs_table(lake_dir, old_run, columns, values)
    for table in delta.tables_present(Lake.at(measured_lake)):
        delta.append(Lake.at(lake_dir), table, delta.read(Lake.at(measured_lake), table), "copy")

    con = open_warehouse(warehouse.build(Lake.at(lake_dir), tmp_path / "w.duckdb"))
    rows = con.execute(
        "select env, run_id, schema_version, status, duration_s, host_group, tool_version"
        " from runs order by started_at"
    ).fetchall()
    assert rows[0] == ("legacy", old_run, 0, "ok", 9.5, None, None)
    # Rows of the current schema keep their values for the same columns.
    assert all(r[0] == ENV and r[5] == "localhost" and r[6] == "test" for r in rows[1:])
    assert len(rows) == 3
    con.close()


def test_a_lake_of_only_old_rows_still_builds(tmp_path):
    old_run = "20250102T030405Z-0ld0ld"
    columns = [pa.field("status", pa.string()), pa.field("error", pa.string())]
    _old_runs_table(
        tmp_path / "lake", old_run, columns, {"status": "failed", "error": "ConnectionError"}
    )
    con = open_warehouse(warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb"))
    assert con.execute("select env, status, profile, mode from runs").fetchall() == [
        ("legacy", "failed", None, None)
    ]
    con.close()


def _steps_table(family: str = "x") -> pa.Table:
    return to_table("steps", [{"family": family, "status": "ok", "duration_s": 1.0}])


def test_the_lake_never_lands_a_run_twice(tmp_path):
    run_id = delta.new_run_id()
    delta.write(Lake.at(tmp_path), "steps", "e", run_id, _steps_table("first"))
    with pytest.raises(delta.LakeConflict, match="never overwrites"):
        delta.write(Lake.at(tmp_path), "steps", "e", run_id, _steps_table("second"))
    assert delta.read(Lake.at(tmp_path), "steps")["family"].to_pylist() == ["first"]
    # Another environment or another run lands beside it.
    delta.write(Lake.at(tmp_path), "steps", "f", run_id, _steps_table())
    delta.write(Lake.at(tmp_path), "steps", "e", delta.new_run_id(), _steps_table())
    assert delta.read(Lake.at(tmp_path), "steps").num_rows == 3


APPENDER = """
import sys
from yardstick.storage import delta
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table
lake_dir, env, n, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
steps = to_table("steps", [{"family": f"f{i}", "status": "ok"} for i in range(rows)])
print("ready", flush=True)
for _ in range(n):
    delta.write(Lake.at(lake_dir), "steps", env, delta.new_run_id(), steps)
"""


def _appenders(lake_dir: str, envs: list[str], n: int, rows: int = 3) -> list:
    import subprocess
    import sys

    return [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, lake_dir, env, str(n), str(rows)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for env in envs
    ]


def test_two_processes_appending_to_one_table_both_land(tmp_path):
    lake_dir = str(tmp_path / "lake")
    procs = _appenders(lake_dir, ["a", "b"], 8)
    assert [p.wait(120) for p in procs] == [0, 0]
    data = delta.read(Lake.at(lake_dir), "steps")
    counts = {env: data["env"].to_pylist().count(env) for env in ("a", "b")}
    assert counts == {"a": 8 * 3, "b": 8 * 3}
    assert len(set(data["run_id"].to_pylist())) == 16


def test_a_writer_killed_at_any_instant_lands_whole_commits_only(tmp_path):
    import os
    import random
    import signal
    import time

    lake_dir = str(tmp_path / "lake")
    delta.write(Lake.at(lake_dir), "steps", "a", delta.new_run_id(), _steps_table())
    rng = random.Random(5)
    for _ in range(3):
        (proc,) = _appenders(lake_dir, ["a"], 1000, rows=50)
        proc.stdout.readline()
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    data = delta.read(Lake.at(lake_dir), "steps")
    runs = data["run_id"].to_pylist()
    # Every run landed whole (50 rows) or not at all; the first one's single row is there.
    assert sorted({runs.count(r) for r in set(runs)}) in ([1, 50], [1])
    assert delta.read(Lake.at(lake_dir), "steps").num_rows == data.num_rows  # readable again


def test_columns_are_matched_by_name_and_unknown_or_missing_ones_refused(tmp_path):
    data = _steps_table()
    reordered = data.select(list(reversed(data.column_names)))
    delta.write(Lake.at(tmp_path), "steps", "e", delta.new_run_id(), reordered)
    assert delta.read(Lake.at(tmp_path), "steps").column("family").to_pylist() == ["x"]
    with pytest.raises(ValueError, match="unknown columns \\['bogus'\\]"):
        delta.write(
            Lake.at(tmp_path),
            "steps",
            "e",
            delta.new_run_id(),
            data.append_column("bogus", pa.array([1])),
        )
    with pytest.raises(ValueError, match="missing columns \\['reason'\\]"):
        delta.write(
            Lake.at(tmp_path), "steps", "e", delta.new_run_id(), data.drop_columns(["reason"])
        )


def test_a_file_outside_the_log_is_never_read(lake_copy, tmp_path):
    # A data file a killed writer left before its commit: in the folder, not in the table.
    partition = next(lake_copy.glob("ping_windows/env=*/period=*"))
    (partition / "part-00000-orphan-c000.snappy.parquet").write_bytes(b"half a file")
    assert _figures(warehouse.build(Lake.at(lake_copy), tmp_path / "w.duckdb"))


def test_reading_a_table_with_deltalake_alone_gives_the_rows_the_warehouse_loaded(
    lake_copy, tmp_path
):
    import subprocess
    import sys

    target = warehouse.build(Lake.at(lake_copy), tmp_path / "w.duckdb")
    # Another process that never imports yardstick: the README's one line.
    script = (
        "import sys, deltalake; t = deltalake.DeltaTable(sys.argv[1]).to_pyarrow_table(); "
        "assert 'yardstick' not in sys.modules; "
        "rows = zip(*(t[c].to_pylist() for c in ('env', 'run_id', 'rtt_max_us'))); "
        "print(sorted(rows), flush=True)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(lake_copy / "ping_windows")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout  # not its exit code: delta-rs may abort at interpreter exit (delta-rs#2184)
    con = open_warehouse(target)
    try:
        loaded = con.execute(
            "select env, run_id, rtt_max_us from raw_ping_windows order by all"
        ).fetchall()
    finally:
        con.close()
    assert loaded and out.strip() == repr(sorted(loaded))


def test_a_failing_build_leaves_the_previous_warehouse_intact(
    lake_copy, tmp_path, tmp_path_factory, monkeypatch
):
    target = warehouse.build(Lake.at(lake_copy), tmp_path / "w.duckdb")
    before, figures = target.read_bytes(), _figures(target)

    # 1. A corrupt data file of a complete run (its `runs` row landed): loading fails.
    bad_run = "20261129T000000Z-badbad"
    delta.write(Lake.at(lake_copy), "runs", ENV, bad_run, to_table("runs", [{"status": "ok"}]))
    (bad,) = [f.path for f in delta.data_files(Lake.at(lake_copy), "runs") if f.min_run == bad_run]
    bad = Path(bad)
    good = bad.read_bytes()
    bad.write_bytes(b"this is not parquet")
    with pytest.raises((duckdb.Error, OSError, pa.ArrowException)):
        warehouse.build(Lake.at(lake_copy), target)
    assert target.read_bytes() == before
    assert _files(tmp_path) == ["lake", "w.duckdb"]
    bad.write_bytes(good)
    Lake.at(lake_copy).table("runs").delete(f"run_id = '{bad_run}'")

    # 2. A SQL model that fails after every raw table was loaded (in a copy of the project).
    project = Path(shutil.copytree(dbt.project_dir(), tmp_path_factory.mktemp("sql") / "sql"))
    (project / "models" / "marts" / "broken.sql").write_text("select * from nowhere")
    monkeypatch.setattr(dbt, "project_dir", lambda: project)
    with pytest.raises(dbt.ModelError, match="model broken"):
        warehouse.build(Lake.at(lake_copy), target)
    assert target.read_bytes() == before
    assert _files(tmp_path) == ["lake", "w.duckdb"]
    assert _figures(target) == figures
