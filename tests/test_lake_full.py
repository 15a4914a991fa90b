"""A lake that fills up mid-run: what landed is kept, the rest is recorded as not landed, the
warehouse and the reports are still built for what is there, the exit code says so, and the
next run reads the lake as it was left (no half file, no temporary file)."""

from __future__ import annotations

import errno
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from conftest import finish, start_yardstick, write_config

from yardstick.storage import compaction, lake

# The lake's file system runs out of inodes (ENOSPC, as a full disk) once the first
# environment has landed: its fingerprint, steps and runs files take 12 inodes (a folder per
# table, environment and period, then the file) and the root one more; the second one's
# fingerprint takes 3 and its round trip's first table 2 more. Inodes rather than bytes: the
# preflight wants 64 MiB free, which no quick run fills. One more for the lake's lock file,
# there before the run as in any lake compacted before (creating even an empty file needs an
# inode, which a disk full of bytes usually still has).
INODES = 19


def _mount_small_lake(where: Path) -> None:
    """Mount a tmpfs with room for INODES files and folders at `where`, or skip."""
    where.mkdir()
    if not shutil.which("mount"):
        pytest.skip("no mount command")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size=65m,nr_inodes={INODES}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    (where / ".compaction.lock").touch()


@pytest.mark.e2e
@pytest.mark.server_agnostic
def test_a_lake_that_fills_mid_run_keeps_what_landed_and_reports_it(redis_server, tmp_path):
    lake_dir = tmp_path / "lake"
    _mount_small_lake(lake_dir)
    try:
        config = write_config(
            tmp_path / "envs.yaml",
            [
                # One server: measured one after the other, in this order.
                {
                    "name": "first",
                    "url": redis_server.url,
                    "mode": "read-only",
                    "families": ["fingerprint"],
                },
                {
                    "name": "second",
                    "url": redis_server.url,
                    "mode": "read-only",
                    "families": ["fingerprint", "round_trip"],
                },
            ],
        )
        args = ["--lake", str(lake_dir), "--warehouse", str(tmp_path / "w" / "warehouse.duckdb")]
        result = finish(
            start_yardstick(
                tmp_path,
                "run",
                "--config",
                str(config),
                "--profile",
                "quick",
                *args,
                "--out",
                str(tmp_path / "out"),
                "--state-dir",
                str(tmp_path / "state"),
            ),
            timeout=420,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 1, output
        assert "Traceback" not in output
        assert "not landed" in output and "No space left on device" in output

        # What landed is whole and current; no temporary file is left in the lake.
        hidden = [p for p in lake_dir.rglob(".*") if p.name != ".compaction.lock"]
        assert hidden == []
        files = lake.current_files(lake_dir)
        assert {("runs", "first")} <= {(f.table, f.env) for f in files}
        assert ("runs", "second") not in {(f.table, f.env) for f in files}

        # The warehouse and the reports hold what landed.
        con = duckdb.connect(str(tmp_path / "w" / "warehouse.duckdb"), read_only=True)
        try:
            runs = dict(con.execute("select env, status from stg_runs").fetchall())
        finally:
            con.close()
        assert runs == {"first": "ok"}
        out = tmp_path / "out"
        assert (out / "index.md").is_file() and (out / "first.md").is_file()
        assert "first" in (out / "index.md").read_text()

        # The next run reads the lake as it was left.
        rebuilt = finish(
            start_yardstick(tmp_path, "report", *args, "--out", str(tmp_path / "again")),
            timeout=300,
        )
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        assert (tmp_path / "again" / "first.md").is_file()
    finally:
        subprocess.run(["umount", "-l", str(lake_dir)], check=False)


def _full_disk(data, where, *args, **kwargs) -> None:
    """A Parquet writer that leaves half a file, then finds the disk full (ENOSPC)."""
    Path(where).write_bytes(b"PAR1 half a file")
    raise OSError(errno.ENOSPC, "No space left on device", str(where))


def test_compaction_on_a_full_disk_leaves_no_half_file_and_loses_nothing(tmp_path, monkeypatch):
    from test_compaction import _land, _rows

    lake_dir = tmp_path / "lake"
    for day in range(3):
        _land(lake_dir, "cache", datetime(2026, 10, 28 + day, 2, tzinfo=UTC))
    before = _rows(lake_dir)
    files = sorted(p.relative_to(lake_dir) for p in lake_dir.rglob("*.parquet"))

    monkeypatch.setattr(lake.pq, "write_table", _full_disk)
    with pytest.raises(OSError) as caught:
        compaction.compact(lake_dir)
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.undo()
    # Nothing committed, nothing deleted, no temporary file left.
    assert sorted(p.relative_to(lake_dir) for p in lake_dir.rglob("*.parquet")) == files
    assert [p for p in lake_dir.rglob(".*") if p.name != ".compaction.lock"] == []
    assert _rows(lake_dir) == before

    # The manifest's temporary file goes too when the disk fills at that point.
    def full(self, *args, **kwargs):
        Path.write_bytes(self, b"{")
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        compaction.write_manifest(lake_dir)
    monkeypatch.undo()
    assert [p for p in lake_dir.rglob(".*") if p.name != ".compaction.lock"] == []

    # The next compaction, with room again, merges everything as if nothing happened.
    report = compaction.compact(lake_dir)
    assert report.files_in >= 3 and _rows(lake_dir) == before
