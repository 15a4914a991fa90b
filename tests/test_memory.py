"""Bytes per key by difference on real servers: the tool's figure against a difference the
test takes itself, MEMORY USAGE below the truth for small strings, SAMPLES 0 against the
default on a list of varied element sizes, and the safety rules (scratch only, foreign keys
refused, only the tool's own keys removed)."""

from __future__ import annotations

import duckdb
import pytest
import redis
from conftest import open_warehouse

from yardstick.flows.plan import FAMILIES, check_families
from yardstick.settings.config import ConfigError, Environment
from yardstick.settings.profiles import MemoryProfile, MemoryShape
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table
from yardstick.tasks.base import utc_now
from yardstick.tasks.memory import (
    STEADY_TIMEOUT_S,
    ForeignKeys,
    NotScratch,
    memory_by_difference,
    wait_until_steady,
)

STRINGS = MemoryShape(name="string", type="string", key_count=10_000, key_format="key:%06d")
LIST = MemoryShape(
    name="list",
    type="list",
    key_count=10,
    key_format="list:%03d",
    value_bytes=10,
    max_value_bytes=400,
    elements=500,
)
PROFILE = MemoryProfile(shapes=[STRINGS, LIST], usage_sample_keys=20)


def scratch(server, db: int = 1) -> Environment:
    """A scratch environment on database `db` of a test server."""
    return Environment(name="scratch", url=server.url.replace("/0", f"/{db}"), mode="scratch")


def used_memory(client: redis.Redis) -> int:
    """used_memory now."""
    return client.info("memory")["used_memory"]


def figures_of(tmp_path, measured) -> duckdb.DuckDBPyConnection:
    """Land the family's tables and a run row, build the warehouse, open it."""
    run_id = delta.new_run_id()
    for table, data in measured.tables.items():
        delta.write(Lake.at(tmp_path / "lake"), table, "scratch", run_id, data)
    now = utc_now()
    run = {
        "profile": "test",
        "started_at": now,
        "finished_at": now,
        "duration_s": 0.0,
        "status": "ok",
        "mode": "scratch",
    }
    delta.write(Lake.at(tmp_path / "lake"), "runs", "scratch", run_id, to_table("runs", [run]))
    warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "wh.duckdb")
    return open_warehouse(tmp_path / "wh.duckdb")


def figure(con, name: str, subject: str) -> tuple[float, int]:
    """(value, n) of one figure."""
    row = con.execute(
        "select value, n from figures where figure = ? and subject = ?", [name, subject]
    ).fetchone()
    assert row is not None, f"no figure {name} [{subject}]"
    return row


def test_bytes_per_key_matches_a_difference_taken_here(redis_server, tmp_path):
    measured = memory_by_difference(scratch(redis_server), PROFILE)
    direct = redis.Redis(port=redis_server.port, db=1)
    assert direct.dbsize() == 0  # left as found

    con = figures_of(tmp_path, measured)
    tool_bytes, n = figure(con, "mem_bytes_per_key", "string")
    assert n >= 3

    # The same keys and values, loaded by the test itself into the same empty database.
    before = used_memory(direct)
    pipe = direct.pipeline(transaction=False)
    for i in range(1, STRINGS.key_count + 1):
        pipe.set(f"{PROFILE.key_prefix}string:key:{i:06d}", b"v" * STRINGS.value_bytes)
    pipe.execute()
    own_bytes = (used_memory(direct) - before) / STRINGS.key_count
    assert tool_bytes == pytest.approx(own_bytes, rel=0.03)

    # MEMORY USAGE leaves out the key's share of the key table: below the truth.
    assert figure(con, "mem_usage_over_actual", "string")[0] < 1
    # A key costs more than what was written into it.
    assert figure(con, "mem_bytes_per_payload_byte", "string")[0] > 1
    # Default samples (5 nested values) extrapolate: on varied element sizes they miss.
    assert figure(con, "mem_samples_default_over_all", "list")[0] != pytest.approx(1, abs=1e-4)
    recovered = figure(con, "mem_removal_recovered_share", "list")[0]
    assert recovered == pytest.approx(1, abs=0.05)
    report = con.execute("select formula_direction from report_memory_shapes").fetchall()
    assert all(row[0] for row in report)  # every estimate says which way it errs

    # What was written per key is stated: the tool's own key names, not the seed's key:%06d.
    written = {
        r[0]: r[1:]
        for r in con.execute(
            "select shape, key_name_bytes, value_bytes_per_element from report_memory_shapes"
        ).fetchall()
    }
    assert written["string"] == (len(f"{PROFILE.key_prefix}string:key:000001"), 100)
    assert written["list"][0] == len(f"{PROFILE.key_prefix}list:list:001")
    assert LIST.value_bytes <= written["list"][1] <= LIST.max_value_bytes
    # Every repetition waited for used_memory to settle before "before", and says how long.
    settles = con.execute(
        "select shape, repetition, settle_s from memory_repetitions order by all"
    ).fetchall()
    assert len(settles) == 2 * PROFILE.repetitions
    assert all(0 < s < STEADY_TIMEOUT_S + 1 for *_, s in settles)


class FakeInfo:
    """A client whose used_memory falls by `steps`, then stays put."""

    def __init__(self, values: list[int]) -> None:
        self.values, self.reads = values, 0

    def info(self, section: str) -> str:
        value = self.values[min(self.reads, len(self.values) - 1)]
        self.reads += 1
        return f"# Memory\r\nused_memory:{value}\r\n"


def test_wait_until_steady_waits_for_memory_to_stop_falling():
    falling = FakeInfo([1_000_000, 900_000, 800_000, 700_000, 700_100, 699_500])
    assert wait_until_steady(falling, reads=3, poll_s=0, tolerance_bytes=1024)
    # Not before the last fall of more than the tolerance, then 3 steady reads.
    assert falling.reads >= 4 + 3
    never = FakeInfo(list(range(10_000_000, 0, -10_000)))
    assert not wait_until_steady(never, reads=3, poll_s=0.001, timeout_s=0.05)


def test_refuses_a_database_holding_foreign_keys(redis_server):
    direct = redis.Redis(port=redis_server.port, db=1)
    direct.set("orders:1", "someone else's")
    commands_before = direct.info("commandstats")
    with pytest.raises(ForeignKeys, match="not written by the tool"):
        memory_by_difference(scratch(redis_server), PROFILE)
    assert direct.dbsize() == 1 and direct.get("orders:1") == b"someone else's"
    calls = direct.info("commandstats")
    for write in ("cmdstat_set", "cmdstat_del", "cmdstat_rpush"):
        assert calls.get(write, {}).get("calls", 0) == commands_before.get(write, {}).get(
            "calls", 0
        )


def test_leftovers_of_the_tool_are_removed_and_only_they(redis_server):
    direct = redis.Redis(port=redis_server.port, db=1)
    direct.set(f"{PROFILE.key_prefix}string:key:999999", "left by a run that died")
    direct.set("yardstick:fixture:other", "another family's key")  # the tool's, not ours
    small = MemoryProfile(
        shapes=[MemoryShape(name="string", type="string", key_count=500)], usage_sample_keys=5
    )
    memory_by_difference(scratch(redis_server), small)
    assert direct.keys("*") == [b"yardstick:fixture:other"]


def test_read_only_never_gets_the_load(redis_server):
    env = Environment(name="site", url=redis_server.url, mode="read-only")
    with pytest.raises(NotScratch, match="scratch environments only"):
        memory_by_difference(env, PROFILE)
    assert redis.Redis(port=redis_server.port).dbsize() == 0
    memory = next(f for f in FAMILIES if f.name == "memory")
    assert memory.skip_reason(env) is not None
    # Asking for it is a one-line configuration error, from a profile or an environment.
    with pytest.raises(ConfigError, match="read-only") as exc:
        MemoryProfile(run_on=["scratch", "read-only"])
    assert "\n" not in str(exc.value)
    asking = Environment(name="site", url=redis_server.url, mode="read-only", families=["memory"])
    with pytest.raises(ConfigError, match="read-only") as exc:
        check_families([asking], "envs.yaml")
    assert "\n" not in str(exc.value)
