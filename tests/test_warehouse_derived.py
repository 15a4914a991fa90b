"""Closed days derived once: the warehouse keeps the marts of closed days in the lake
(yardstick/storage/derived.py), a rebuild imports them instead of recomputing those days, and
gives what a rebuild from the raw rows gives; a late run, changed models or a killed export
make a rebuild derive again what they touch, and a killed rebuild resumes where it stopped."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import test_golden_figures as golden
from deltalake import DeltaTable
from test_warehouse_incremental import _tables, assert_same_marts

from yardstick.storage import dbt, delta, derived, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import SCHEMA_VERSION

# Synthetic runs (the golden lake's): what is tested is the warehouse, not a measurement.
pytestmark = [pytest.mark.server_agnostic]

NIGHTS = 3  # of the golden lake (nights and collections of two environments, a day apart)
FIRST_DAY = golden.FIRST_NIGHT
DAY = [f"{FIRST_DAY + timedelta(days=n):%Y%m%d}" for n in range(NIGHTS)]


def _day(run_id: str) -> int:
    """Which of the days (0, 1, 2) a run belongs to."""
    return (delta.run_day(run_id) - FIRST_DAY.date()).days


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """Three days of the golden lake, the warehouse updated after each (as the nightly flow
    does, holding later runs back); yields (lake, incremental warehouse, lake without derived
    tables, complete runs per day)."""
    root = tmp_path_factory.mktemp("days")
    lake_dir, incremental = root / "lake", root / "incremental.duckdb"
    golden.land_nights(lake_dir, NIGHTS)
    per_day = [0] * NIGHTS
    for _, run in delta.complete_runs(Lake.at(lake_dir)):
        per_day[_day(run)] += 1
    runs = sorted(run for _, run in delta.complete_runs(Lake.at(lake_dir)))
    for day in range(NIGHTS):
        warehouse.update(
            Lake.at(lake_dir), incremental, until_run_id=max(r for r in runs if _day(r) == day)
        )
    raw = Path(shutil.copytree(lake_dir, root / "raw-lake"))
    shutil.rmtree(raw / derived.ROOT)
    return lake_dir, incremental, raw, per_day


def _complete(lake_dir: Path) -> set[tuple[str, str]]:
    """The lake's complete runs."""
    return warehouse._survey(Lake.at(Lake.at(lake_dir)), {}, {}).candidates


def _chain(lake_dir: Path) -> list[derived.Checkpoint]:
    return derived.chain(
        Lake.at(Lake.at(lake_dir)), _complete(lake_dir), dbt.models_digest(), SCHEMA_VERSION
    )


def test_closed_days_are_kept_and_a_rebuild_imports_them(days, tmp_path):
    lake_dir, incremental, raw, per_day = days
    found = _chain(lake_dir)
    # Each nightly update kept the day it closed: day 1, then day 2; day 3 is open.
    assert [cp.through_day for cp in found] == DAY[:2]
    assert [cp.runs for cp in found] == per_day[:2]
    # Readable by any Delta reader, partitioned by period.
    figures = DeltaTable(str(lake_dir / derived.ROOT / "figures")).to_pyarrow_table()
    assert figures.num_rows > 0
    assert set(figures.column("period").to_pylist()) == {f"{FIRST_DAY:%Y-%m}"}
    assert {_day(r) for r in figures.column("run_id").to_pylist()} == {0, 1}

    # The nightly compaction merges each derived table's files; the chain is unchanged.
    before = len(DeltaTable(str(lake_dir / derived.ROOT / "figures")).file_uris())
    derived.compact(Lake.at(Lake.at(lake_dir)), vacuum_hours=0)
    assert len(DeltaTable(str(lake_dir / derived.ROOT / "figures")).file_uris()) < before
    assert _chain(lake_dir) == found

    # A rebuild imports the two closed days, derives the open one, and equals both the
    # incremental warehouse and a rebuild from the raw rows alone.
    imported = warehouse.update(Lake.at(lake_dir), tmp_path / "imported.duckdb", full=True)
    assert imported.from_derived == sum(per_day[:2]), imported
    from_raw = warehouse.update(Lake.at(raw), tmp_path / "from_lake.duckdb", full=True)
    assert from_raw.from_derived == 0
    assert_same_marts(_tables(incremental), _tables(tmp_path / "from_lake.duckdb"))
    assert_same_marts(_tables(tmp_path / "imported.duckdb"), _tables(tmp_path / "from_lake.duckdb"))


def test_a_late_run_makes_its_day_and_the_later_ones_derived_again(days, tmp_path):
    lake_dir, incremental, _, per_day = days
    lake_copy = Path(shutil.copytree(lake_dir, tmp_path / "lake"))
    warehouse_copy = Path(shutil.copy(incremental, tmp_path / "w.duckdb"))
    # A site's run of day 2 arrives after day 3 was loaded.
    late = delta.new_run_id(FIRST_DAY + timedelta(days=1, hours=20))
    ran = delta.read(Lake.at(lake_dir), "runs", envs=["alpha"]).column("run_id").to_pylist()
    model = min(run for run in ran if _day(run) == 1)  # its rows, under the late run's id
    for table in ("steps", "runs"):
        rows = [r for r in delta.read(Lake.at(lake_dir), table, envs=["alpha"]).to_pylist()]
        data = pa.Table.from_pylist([r for r in rows if r["run_id"] == model])
        data = data.drop_columns(["run_id", "schema_version", "env", "period"])
        delta.write(Lake.at(lake_copy), table, "alpha", late, data)
    # Day 1 still holds; day 2 no longer does.
    assert [cp.through_day for cp in _chain(lake_copy)] == DAY[:1]
    result = warehouse.update(Lake.at(lake_copy), warehouse_copy)
    assert result.mode == "full" and "arrived after" in result.reason
    assert result.from_derived == per_day[0]
    # The rebuild kept day 2 again, late run included.
    again = _chain(lake_copy)
    assert [cp.through_day for cp in again] == DAY[:2]
    assert again[1].runs == per_day[1] + 1


def test_changed_models_derive_again_and_a_killed_rebuild_resumes(days, tmp_path, monkeypatch):
    lake_dir, incremental, _, per_day = days
    lake_copy = Path(shutil.copytree(lake_dir, tmp_path / "lake"))
    path = tmp_path / "w.duckdb"
    monkeypatch.setattr(dbt, "models_digest", lambda: "changed-models")
    assert _chain(lake_copy) == []  # derived by other models: nothing to import

    def killed_on_day_3(real):
        def batch_step(path, lake_dir, survey, batch, *args):
            if any(_day(run) == 2 for _, run in batch):
                raise RuntimeError("killed while deriving day 3")
            return real(path, lake_dir, survey, batch, *args)

        return batch_step

    monkeypatch.setattr(warehouse, "_replay_batch", killed_on_day_3(warehouse._replay_batch))
    monkeypatch.setattr(warehouse, "_dbt_batch", killed_on_day_3(warehouse._dbt_batch))
    with pytest.raises(RuntimeError, match="killed"):
        warehouse.update(Lake.at(lake_copy), path, full=True)
    assert not path.exists()
    # What it derived before the kill was kept: the next rebuild starts from there.
    assert [cp.through_day for cp in _chain(lake_copy)] == DAY[1:2]
    monkeypatch.undo()
    monkeypatch.setattr(dbt, "models_digest", lambda: "changed-models")
    resumed = warehouse.update(Lake.at(lake_copy), path, full=True)
    assert resumed.from_derived == sum(per_day[:2])
    assert_same_marts(_tables(path), _tables(incremental))
    # The next nightly compaction drops the first models' rows: one chain's rows remain.
    derived.compact(Lake.at(Lake.at(lake_copy)), vacuum_hours=0)
    ids = DeltaTable(str(lake_copy / derived.ROOT / "figures")).to_pyarrow_table()
    assert set(ids.column("checkpoint").to_pylist()) == {cp.checkpoint for cp in _chain(lake_copy)}


def test_an_export_killed_before_its_manifest_is_ignored(days, tmp_path, monkeypatch):
    lake_dir, incremental, _, _ = days
    lake_copy = Path(shutil.copytree(lake_dir, tmp_path / "lake"))
    root = Lake.at(lake_copy)
    real_write = derived._write

    def no_manifest(lake_dir, name, data):
        if name == derived.MANIFEST:
            raise OSError("killed before the manifest")
        real_write(lake_dir, name, data)

    monkeypatch.setattr(derived, "_write", no_manifest)
    with pytest.raises(OSError):
        con = duckdb.connect(str(incremental), read_only=True)
        try:
            derived.export(con, Lake.at(root), "", derived.NO_DAY, DAY[1], [], "x", SCHEMA_VERSION)
        finally:
            con.close()
    # Its rows landed, no manifest names them: the chain is what it was.
    assert _chain(lake_copy) == _chain(lake_dir)


def test_an_s3_lake_keeps_and_gives_back_derived_days(days, s3_lake, tmp_path):
    """The derived tables on S3 (moto's real S3 API): exported, listed and imported alike."""
    _, incremental, _, _ = days
    root = Lake.at(s3_lake("derived"))
    copy = Path(shutil.copy(incremental, tmp_path / "w.duckdb"))
    con = duckdb.connect(str(copy))
    try:
        runs = con.execute(
            f"select env, run_id from {warehouse.LOADED} where run_id < '{DAY[2]}'"
        ).fetchall()
        made = derived.export(con, root, "", derived.NO_DAY, DAY[1], runs, "digest", SCHEMA_VERSION)
        want = {m: con.execute(f"select count(*) from marts.{m} where run_id < '{DAY[2]}'")
                .fetchone()[0] for m in ("figures", "runs", "steps")}  # fmt: skip
        for mart in derived.mart_tables(con):
            con.execute(f"delete from marts.{mart}")
        assert derived.checkpoints(Lake.at(root)) == [made]
        assert derived.chain(Lake.at(root), set(runs), "digest", SCHEMA_VERSION) == [made]
        derived.load(con, Lake.at(root), [made])
        got = {m: con.execute(f"select count(*) from marts.{m}").fetchone()[0] for m in want}
    finally:
        con.close()
    assert got == want and want["figures"] > 0
