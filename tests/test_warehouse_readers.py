"""Readers never block the night, and a killed writer's WAL is never replayed: an update
proceeds while another process holds the warehouse open read-only (it works on a copy and
swaps it in), and a stale `warehouse.duckdb.wal` makes the warehouse rebuild from the lake."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
from conftest import open_warehouse
from test_compaction import _land

from yardstick.storage import warehouse
from yardstick.storage.lakefs import Lake

HOLD = (
    "import duckdb, sys, time\n"
    "con = duckdb.connect(sys.argv[1], read_only=True)\n"
    "print(con.execute('select count(*) from marts.runs').fetchone()[0], flush=True)\n"
    "sys.stdin.readline()\n"
    "print(con.execute('select count(*) from marts.runs').fetchone()[0], flush=True)\n"
)


@contextmanager
def held_open(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the warehouse open read-only (as `duckdb -readonly` does)."""
    reader = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        reader.stdout.readline()  # its first count: the file is open
        yield reader
    finally:
        reader.kill()
        reader.wait()


def _runs(path: Path) -> int:
    con = open_warehouse(path)
    try:
        return con.execute("select count(*) from marts.runs").fetchone()[0]
    finally:
        con.close()


def test_an_update_proceeds_while_another_process_reads_the_warehouse(tmp_path, caplog):
    caplog.set_level("INFO")
    lake_dir, target = tmp_path / "lake", tmp_path / "w.duckdb"
    first = datetime.now(UTC) - timedelta(hours=2)
    _land(lake_dir, "cache", first)
    warehouse.update(Lake.at(lake_dir), target)
    _land(lake_dir, "cache", first + timedelta(minutes=5))
    warehouse.update(Lake.at(lake_dir), target)  # the recorded plan, replayed from now on
    _land(lake_dir, "cache", first + timedelta(minutes=10))
    with held_open(target) as reader:
        result = warehouse.update(Lake.at(lake_dir), target)
        assert result.mode == "incremental" and result.runs_added == 1
        assert _runs(target) == 3
        # The reader keeps the version it opened, undisturbed.
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "2"
        # Nothing new: the update's note of the lake is kept on a copy as well.
        assert warehouse.update(Lake.at(lake_dir), target).mode == "up-to-date"
    assert "updated on a copy swapped into place" in caplog.text
    assert not warehouse.building_path(target).parent.exists()


def test_a_stale_wal_is_not_replayed_the_warehouse_is_rebuilt(tmp_path, caplog):
    lake_dir, target = tmp_path / "lake", tmp_path / "w.duckdb"
    first = datetime.now(UTC) - timedelta(hours=2)
    _land(lake_dir, "cache", first)
    warehouse.update(Lake.at(lake_dir), target)
    # A writer killed after its commit, before any checkpoint: a junk table and a second
    # copy of a run's row, in the WAL only.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import duckdb, os, sys\n"
            "con = duckdb.connect(sys.argv[1])\n"
            "con.execute('PRAGMA disable_checkpoint_on_shutdown')\n"
            "con.execute(\"SET checkpoint_threshold = '1TB'\")\n"
            "con.execute('create table main.junk as select 1 as i')\n"
            "con.execute('insert into marts.runs select * from marts.runs')\n"
            "os._exit(9)\n",
            str(target),
        ],
        check=False,
        timeout=60,
    )
    wal = target.with_name(target.name + ".wal")
    assert wal.stat().st_size > 0
    _land(lake_dir, "cache", first + timedelta(minutes=5))
    result = warehouse.update(Lake.at(lake_dir), target)
    assert result.mode == "full" and "stale w.duckdb.wal" in result.reason
    assert not wal.exists()
    lines = [r.message for r in caplog.records if "not replayed" in r.getMessage()]
    assert len(lines) == 1
    con = open_warehouse(target)
    try:
        junk = con.execute("select count(*) from duckdb_tables() where table_name = 'junk'")
        assert junk.fetchone()[0] == 0
        assert con.execute(
            "select count(*), count(distinct run_id) from marts.runs"
        ).fetchone() == (
            2,
            2,
        )
    finally:
        con.close()
    duckdb.connect(str(target)).close()  # writable: nothing left holding it
