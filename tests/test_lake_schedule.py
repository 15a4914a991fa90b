"""tests/lakes/schedule.py, the synthetic schedule the retention and lake-files benches land: it
knows every table the tool declares, follows the declared schemas, and its collections land
only what is new. (Running the benches: tests/test_benches.py.)"""

from __future__ import annotations

from datetime import timedelta


def test_the_real_shape_knows_every_declared_table():
    """Every table the tool declares for a run kind is in bench/real_shape.json (else: run
    bench/real_shape.py); quick, without the bench."""
    from lakes import schedule as _schedule

    assert _schedule.unknown_tables() == {}


def test_generator_follows_the_declared_schema(monkeypatch):
    """A column added to a table is generated (null: the real shape has not seen it), a
    column dropped is left out; nothing crashes."""
    import pyarrow as pa
    from lakes import schedule as _schedule

    from yardstick.storage import schemas

    old = schemas.TABLES["slowlog_collections"]
    changed = old.remove(old.get_field_index("read_s")).append(pa.field("queue_bytes", pa.int64()))
    monkeypatch.setitem(schemas.TABLES, "slowlog_collections", changed)
    _schedule._replay_base.cache_clear()
    try:
        day = _schedule.TONIGHT - timedelta(days=1)
        collections = _schedule.collection_tables(0, [day], 12)["slowlog_collections"]
        nightly = _schedule.nightly_run(0, day, 12, 100, 128, True)["slowlog_collections"]
    finally:
        _schedule._replay_base.cache_clear()
    for data in (collections, nightly):
        assert data.schema == schemas.file_schema("slowlog_collections")
        assert data["queue_bytes"].null_count == data.num_rows
        assert "read_s" not in data.column_names


def test_collections_land_only_what_is_new():
    """Each collection's SLOWLOG entries are above its cursor, at most 5 of them (the stream's
    new entries), and the cursor is the previous collection's newest id on the same server."""
    from lakes import schedule as _schedule

    day = _schedule.TONIGHT - timedelta(days=1)
    tables = _schedule.collection_tables(0, [day], 24)
    reads = tables["slowlog_collections"].to_pylist()
    entries = tables["slowlog_entries"].to_pylist()
    for before, read in zip(reads, reads[1:], strict=False):
        landed = [e["entry_id"] for e in entries if e["run_id"] == read["run_id"]]
        if before["server_run_id"] == read["server_run_id"]:  # else a restart: all is new
            assert read["landed_above_id"] == before["newest_queued_id"]
            assert len(landed) <= _schedule.SLOWLOG_NEW_MAX
        assert all(i > (read["landed_above_id"] or -1) for i in landed)
        assert all(read["oldest_queued_id"] <= i <= read["newest_queued_id"] for i in landed)
