"""A collection's cursors read what the round needs (yardstick/storage/cursors.py): the newest
complete run of each environment is found from the tables' logs (each collection's file holds
one run), and only that run's rows are opened; a merged file is opened only when it could hold
a newer run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from yardstick.storage import compaction, cursors, delta
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table

pytestmark = pytest.mark.server_agnostic
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def land(lake_dir: str, envs: list[str], n: int, complete: bool = True) -> str:
    """Collection `n` of every environment, as one batch (one file per env and table)."""
    run_id, at = (
        f"20261129T1{n // 12:01d}{5 * (n % 12):02d}00Z-{n:06d}",
        T0 + timedelta(minutes=5 * n),
    )
    with delta.batch(Lake.at(lake_dir), f"collection {n}"):
        for env in envs:
            row = {"server_run_id": f"srv-{env}", "collected_at": at, "entries_returned": 1}
            row.update(newest_queued_id=n, oldest_queued_id=n, landed_above_id=n - 1)
            delta.write(
                Lake.at(lake_dir),
                "slowlog_collections",
                env,
                run_id,
                to_table("slowlog_collections", [row]),
            )
            event = {"server_run_id": f"srv-{env}", "event": "command", "latest_at": at}
            event["history_newest_at"] = at
            delta.write(
                Lake.at(lake_dir),
                "latency_latest",
                env,
                run_id,
                to_table("latency_latest", [event]),
            )
            if complete:
                run = {"profile": "collect", "started_at": at, "status": "ok"}
                delta.write(Lake.at(lake_dir), "runs", env, run_id, to_table("runs", [run]))
    return run_id


@pytest.fixture
def opened(monkeypatch) -> dict[str, list]:
    """The data files the cursors open: run_id columns and rows."""
    seen: dict[str, list] = {"run_ids": [], "rows": []}
    run_ids_of, read_file = delta.run_ids_of, delta.read_file

    def counted_run_ids(f):
        seen["run_ids"].append(f)
        return run_ids_of(f)

    def counted_read(f, *args, **kwargs):
        seen["rows"].append(f)
        return read_file(f, *args, **kwargs)

    monkeypatch.setattr(delta, "run_ids_of", counted_run_ids)
    monkeypatch.setattr(delta, "read_file", counted_read)
    return seen


def test_a_round_opens_only_the_newest_complete_run_s_files(tmp_path, opened):
    lake_dir, envs = str(tmp_path / "lake"), ["a", "b", "c"]
    ids = [land(lake_dir, envs, n) for n in range(1, 9)]
    land(lake_dir, envs, 9, complete=False)  # killed before its runs row: never a cursor
    before = "20261129T120000Z-999999"
    landed = cursors.reader(Lake.at(lake_dir), before)
    for env in envs:
        found = landed(env)
        assert found.problem is None
        assert (found.slowlog_run_id, found.latency_run_id) == (ids[-1], ids[-1])
        assert found.slowlog_ids == {f"srv-{env}": 8}
    assert opened["run_ids"] == []  # the logs' statistics named every file's one run
    # One file per table and environment: the newest complete run's rows.
    assert sorted((f.table, f.env) for f in opened["rows"]) == sorted(
        (t, e) for t in ("latency_latest", "slowlog_collections") for e in envs
    )


def test_merged_files_are_opened_only_when_they_could_hold_a_newer_run(tmp_path, opened):
    lake_dir, envs = str(tmp_path / "lake"), ["a"]
    for n in range(1, 6):
        land(lake_dir, envs, n)
    compaction.compact(Lake.at(lake_dir), min_files=2)  # one merged file per table
    newest = land(lake_dir, envs, 6)
    found = cursors.read_landed(Lake.at(lake_dir), "a", "20261129T120000Z-999999")
    assert found.slowlog_run_id == newest and found.slowlog_ids == {"srv-a": 6}
    assert opened["run_ids"] == []  # the newest run is in a one-run file: the merged one waits
    opened["rows"].clear()
    merged = cursors.read_landed(
        Lake.at(lake_dir), "a", newest
    )  # run 6 started after: runs 1-5 count
    assert merged.slowlog_ids == {"srv-a": 5}
    assert {f.table for f in opened["run_ids"]} <= {"runs", "slowlog_collections", "latency_latest"}
