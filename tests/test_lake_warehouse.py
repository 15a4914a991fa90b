"""The lake is append-only and atomic; the warehouse is rebuilt from it alone, atomically."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import duckdb
import lakes
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from yardstick.host.embedded import RedisProcess
from yardstick.settings.config import Environment
from yardstick.settings.profiles import RoundTripProfile
from yardstick.storage import dbt, lake, warehouse
from yardstick.storage.schemas import SCHEMA_VERSION, TABLES, to_table
from yardstick.tasks.fingerprint import fingerprint
from yardstick.tasks.roundtrip import round_trip

ENV = "lake-test"


def _land_run(lake_dir: Path, env: Environment) -> str:
    """Measure a real server (fingerprint and a short round trip) and land it as a run, its
    runs and steps rows from the shared lake factory (tests/lakes.py)."""
    run = lakes.new_run(lake_dir, env.name, datetime.now(UTC))
    measured = [
        fingerprint.fn(env, None),
        round_trip.fn(env, RoundTripProfile(windows=2, window_s=0.2, interval_ms=0.5)),
    ]
    for result in measured:
        for table, data in result.tables.items():
            lake.write(lake_dir, table, env.name, run.run_id, data)
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
    con = duckdb.connect(str(path), read_only=True)
    try:
        return sorted(con.execute("select * from figures").fetchall(), key=repr)
    finally:
        con.close()


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_two_rebuilds_from_the_same_lake_give_identical_figures(lake_copy, tmp_path):
    first = _figures(warehouse.build(lake_copy, tmp_path / "one.duckdb"))
    second = _figures(warehouse.build(lake_copy, tmp_path / "two.duckdb"))
    assert len(first) >= 2 * 8  # two runs, every round-trip figure
    assert first == second
    # Rebuilding in place gives the same again, and leaves only the warehouse behind.
    third = _figures(warehouse.build(lake_copy, tmp_path / "one.duckdb"))
    assert third == first
    assert _files(tmp_path) == ["lake", "one.duckdb", "two.duckdb"]


def test_every_lake_file_carries_run_id_and_schema_version(measured_lake):
    files = sorted(measured_lake.glob("*/env=*/period=*/*.parquet"))
    assert {f.parts[-4] for f in files} >= {"runs", "steps", "fingerprint", "ping_windows"}
    for f in files:
        table = f.parts[-4]
        data = pq.read_table(f)
        assert data.schema.metadata[b"yardstick.schema_version"] == str(SCHEMA_VERSION).encode()
        assert data.schema.metadata[b"yardstick.table"] == table.encode()
        assert set(data.column("run_id").to_pylist()) <= {f.stem}
        assert data.column_names[:2] == ["run_id", "schema_version"]
        assert f == lake.file_path(measured_lake, table, ENV, f.stem)


def test_an_older_file_lacking_a_column_loads_with_that_column_null(lake_copy, tmp_path):
    # A runs file from before `host_group` and `tool_version` existed, written by hand.
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
    row = {f.name: values.get(f.name) for f in columns}
    old = pa.Table.from_pylist(
        [{"run_id": old_run, "schema_version": 0, **row}],
        schema=pa.schema([("run_id", pa.string()), ("schema_version", pa.int16()), *columns]),
    )
    path = lake.file_path(lake_copy, "runs", "legacy", old_run)
    path.parent.mkdir(parents=True)
    pq.write_table(old, path)

    con = duckdb.connect(str(warehouse.build(lake_copy, tmp_path / "w.duckdb")), read_only=True)
    rows = con.execute(
        "select env, run_id, schema_version, status, duration_s, host_group, tool_version"
        " from stg_runs order by started_at"
    ).fetchall()
    assert rows[0] == ("legacy", old_run, 0, "ok", 9.5, None, None)
    # Files of the current schema keep their values for the same columns.
    assert all(r[0] == ENV and r[5] == "localhost" and r[6] == "test" for r in rows[1:])
    assert len(rows) == 3
    con.close()


def test_a_lake_of_only_old_files_still_builds(tmp_path):
    old_run = "20250102T030405Z-0ld0ld"
    data = pa.table(
        {
            "run_id": [old_run],
            "schema_version": pa.array([0], pa.int16()),
            "status": ["failed"],
            "error": ["ConnectionError: refused"],
        }
    )
    path = lake.file_path(tmp_path / "lake", "runs", "legacy", old_run)
    path.parent.mkdir(parents=True)
    pq.write_table(data, path)
    con = duckdb.connect(str(warehouse.build(tmp_path / "lake", tmp_path / "w.duckdb")))
    assert con.execute("select env, status, profile, mode from stg_runs").fetchall() == [
        ("legacy", "failed", None, None)
    ]
    con.close()


def _steps_table(family: str = "x") -> pa.Table:
    return to_table("steps", [{"family": family, "status": "ok", "duration_s": 1.0}])


def test_the_lake_never_overwrites_and_leaves_no_temporary_file(tmp_path):
    run_id = lake.new_run_id()
    path = lake.write(tmp_path, "steps", "e", run_id, _steps_table("first"))
    before = path.read_bytes()
    with pytest.raises(lake.LakeConflict, match="never overwrites"):
        lake.write(tmp_path, "steps", "e", run_id, _steps_table("second"))
    assert path.read_bytes() == before
    assert _files(path.parent) == [path.name]
    # Another environment or another run is another file.
    lake.write(tmp_path, "steps", "f", run_id, _steps_table())
    lake.write(tmp_path, "steps", "e", lake.new_run_id(), _steps_table())
    assert len(list(tmp_path.glob("steps/env=*/period=*/*.parquet"))) == 3


def test_a_file_appearing_during_the_write_is_not_overwritten(tmp_path, monkeypatch):
    run_id = lake.new_run_id()
    final = lake.file_path(tmp_path, "steps", "e", run_id)

    def write_then_lose_the_race(data, where, **kwargs):
        pq.write_table(data, where, **kwargs)
        final.write_bytes(b"another writer's file")  # lands between the check and the link

    monkeypatch.setattr(lake, "pq", SimpleNamespace(write_table=write_then_lose_the_race))
    with pytest.raises(lake.LakeConflict):
        lake.write(tmp_path, "steps", "e", run_id, _steps_table())
    assert final.read_bytes() == b"another writer's file"
    assert _files(final.parent) == [final.name]


def test_a_crash_while_writing_leaves_no_half_file(tmp_path, monkeypatch):
    run_id = lake.new_run_id()

    def crash(data, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lake, "pq", SimpleNamespace(write_table=crash))
    with pytest.raises(OSError, match="No space"):
        lake.write(tmp_path, "steps", "e", run_id, _steps_table())
    assert list(tmp_path.rglob("*.parquet")) == []
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_columns_are_matched_by_name_and_unknown_or_missing_ones_refused(tmp_path):
    data = _steps_table()
    reordered = data.select(list(reversed(data.column_names)))
    path = lake.write(tmp_path, "steps", "e", lake.new_run_id(), reordered)
    assert pq.read_table(path).column("family").to_pylist() == ["x"]
    with pytest.raises(ValueError, match="unknown columns \\['bogus'\\]"):
        lake.write(
            tmp_path, "steps", "e", lake.new_run_id(), data.append_column("bogus", pa.array([1]))
        )
    with pytest.raises(ValueError, match="missing columns \\['reason'\\]"):
        lake.write(tmp_path, "steps", "e", lake.new_run_id(), data.drop_columns(["reason"]))


def test_a_temporary_file_in_the_lake_is_never_read(lake_copy, tmp_path):
    partition = next(lake_copy.glob("ping_windows/env=*/period=*"))
    (partition / ".20261129T000000Z-abcdef.parquet.tmp-1-ab12").write_bytes(b"half a file")
    assert _figures(warehouse.build(lake_copy, tmp_path / "w.duckdb"))


def test_a_failing_build_leaves_the_previous_warehouse_intact(
    lake_copy, tmp_path, tmp_path_factory, monkeypatch
):
    target = warehouse.build(lake_copy, tmp_path / "w.duckdb")
    before, figures = target.read_bytes(), _figures(target)

    # 1. A corrupt file of a complete run (its `runs` row landed) in the lake: loading fails.
    bad_run = "20261129T000000Z-badbad"
    runs = lake.write(lake_copy, "runs", ENV, bad_run, to_table("runs", [{"status": "ok"}]))
    bad = lake.file_path(lake_copy, "ping_windows", ENV, bad_run)
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"this is not parquet")
    with pytest.raises(duckdb.Error):
        warehouse.build(lake_copy, target)
    assert target.read_bytes() == before
    assert _files(tmp_path) == ["lake", "w.duckdb"]
    bad.unlink()
    runs.unlink()

    # 2. A SQL model that fails after every raw table was loaded (in a copy of the project).
    project = Path(shutil.copytree(dbt.project_dir(), tmp_path_factory.mktemp("sql") / "sql"))
    (project / "models" / "marts" / "broken.sql").write_text("select * from nowhere")
    monkeypatch.setattr(dbt, "project_dir", lambda: project)
    with pytest.raises(dbt.ModelError, match="model broken"):
        warehouse.build(lake_copy, target)
    assert target.read_bytes() == before
    assert _files(tmp_path) == ["lake", "w.duckdb"]
    assert _figures(target) == figures
