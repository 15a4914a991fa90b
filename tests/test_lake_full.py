"""A lake that fills up mid-run: what landed is kept, the rest is recorded as not landed, the
warehouse and the reports are still built for what is there, the exit code says so, and the
next run reads the lake as it was left (no half file, no temporary file)."""

from __future__ import annotations

import errno
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import finish, open_warehouse, start_yardstick, write_config

from yardstick.storage import compaction, delta
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import TABLES

# The lake's file system runs out of inodes (ENOSPC, as a full disk) once the first
# environment has landed. Inodes rather than bytes: the preflight wants 64 MiB free, which no
# quick run fills. A Delta table's first commit takes 6 (its folder, _delta_log, the commit,
# env=, period=, the data file), another environment's rows 4 (env=, period=, file, commit),
# and each commit one more for a moment (written under a temporary name, then renamed). The
# first environment lands the fingerprint family's tables (and the host load sampled through
# it, when that table is declared), steps and runs; the second one's fingerprint lands, then
# its round trip's first table finds no inode for its table's log. Two more: the lake's root
# and its lock file, there before the run as in any lake compacted before.
FIRST_TABLES = [
    "fingerprint",
    *(["family_load"] if "family_load" in TABLES else []),
    "steps",
    "runs",
]
SECOND_TABLES = FIRST_TABLES[:-2]
INODES = 2 + 6 * len(FIRST_TABLES) + 4 * len(SECOND_TABLES) + 1


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
        # delta-rs's Rust panic (object_store's BufWriter after the failed write) stays off
        # the terminal: the error line names the lake's table instead.
        assert "panicked" not in output and "stack backtrace" not in output, output
        assert f"{lake_dir}/" in output

        # What landed is whole and current; no temporary file is left in the lake.
        hidden = [p for p in lake_dir.rglob(".*") if p.name != ".compaction.lock"]
        assert hidden == []
        complete = delta.complete_runs(Lake.at(lake_dir))
        assert {env for env, _ in complete} == {"first"}

        # The warehouse and the reports hold what landed.
        con = open_warehouse(tmp_path / "w" / "warehouse.duckdb")
        try:
            runs = dict(con.execute("select env, status from runs").fetchall())
        finally:
            con.close()
        assert runs == {"first": "ok"}
        out = tmp_path / "out"
        assert (out / "index.md").is_file() and (out / "first.md").is_file()
        assert "first" in (out / "index.md").read_text()
        # The environment that did not land is named, with why, in the index and comparison.
        index, comparison = (out / "index.md").read_text(), (out / "comparison.md").read_text()
        assert "| second | **not landed**: OSError: " in index, index
        assert "- **second**: its run did not land in the lake (OSError: " in index, index
        assert "No space left on device" in index
        assert "| second | **not landed** |" in comparison, comparison
        assert "Tonight's run of second did not land in the lake" in comparison

        # The next run reads the lake as it was left.
        rebuilt = finish(
            start_yardstick(tmp_path, "report", *args, "--out", str(tmp_path / "again")),
            timeout=300,
        )
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        assert (tmp_path / "again" / "first.md").is_file()
    finally:
        subprocess.run(["umount", "-l", str(lake_dir)], check=False)


def test_compaction_on_a_full_disk_commits_nothing_and_loses_nothing(tmp_path):
    from test_compaction import _land, _rows

    lake_dir = tmp_path / "lake"
    lake_dir.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(lake_dir)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        for day in range(3):
            _land(lake_dir, "cache", datetime(2026, 10, 28 + day, 2, tzinfo=UTC))
        before = _rows(lake_dir)
        versions = {t: Lake.at(lake_dir).table(t).version() for t in before}
        filler = lake_dir / "filler"
        with open(filler, "wb") as out:
            try:
                while True:
                    out.write(b"\0" * 65536)
                    out.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        with pytest.raises(OSError) as caught:
            compaction.compact(Lake.at(lake_dir))
        assert caught.value.errno == errno.ENOSPC
        # Nothing committed, every row still there once.
        assert {t: Lake.at(lake_dir).table(t).version() for t in before} == versions
        assert _rows(lake_dir) == before
        # The next compaction, with room again, merges everything as if nothing happened.
        filler.unlink()
        report = compaction.compact(Lake.at(lake_dir), vacuum_hours=0)
        assert report.files_in >= 3 and _rows(lake_dir) == before
    finally:
        subprocess.run(["umount", "-l", str(lake_dir)], check=False)
