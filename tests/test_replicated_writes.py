"""The tool's writes replicated to a replica are its own entries there too: on a real primary
and replica, a write to a `yardstick:` key and to a redis-benchmark key reach the replica's
SLOWLOG over the replication link (no client name); collected by the slowlog family from the
replica and built into the warehouse, they are measurement_caused, an application's write
replicated beside them is not."""

from __future__ import annotations

from datetime import UTC, datetime

import lakes
import pytest
from topologies import client, running, start_replicated, wait_until

from yardstick.access.environment import Environment
from yardstick.storage import warehouse
from yardstick.storage.lakefs import Lake
from yardstick.tasks.slowlog import SlowlogProfile, collect_slowlog

pytestmark = pytest.mark.e2e

AT = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


def test_the_tools_replicated_writes_are_told_apart(newest_binary, tmp_path):
    with running(start_replicated, newest_binary) as shape:
        (replica,) = shape.replicas
        shape.wait_replicas_up()
        client(replica).config_set("slowlog-log-slower-than", 0)
        client(replica).slowlog_reset()
        primary = client(shape.primary)
        primary.set("yardstick:mem:string:key:000001", "v")
        primary.set("key:000000001234", "v")
        primary.set("user:42", "v")
        wait_until(lambda: client(replica).dbsize() == 3, 10, "the writes replicated")
        env = Environment(name="cache.replica", url=shape.by_port(replica).url, mode="read-only")
        measured = collect_slowlog(env, SlowlogProfile())
    run = lakes.new_run(tmp_path / "lake", "cache.replica", AT)
    lakes.runs_row(run, "nightly", mode="read-only")
    lakes.steps(run, {"slowlog": None})
    lakes.fingerprint(run)
    for name, table in measured.tables.items():
        run.write(name, table.to_pylist())
    path = warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")
    con = warehouse.connect_read_only(path)
    try:
        rows = con.execute(
            "select args[2], measurement_caused from staging.stg_slowlog_entries"
            " where command = 'set'"
        ).fetchall()
    finally:
        con.close()
    caused = dict(rows)
    assert caused == {
        "yardstick:mem:string:key:000001": True,
        "key:000000001234": True,
        "user:42": False,
    }, rows
