"""SLOWLOG and LATENCY replies: the real redis-cli samples (7.0.15, 7.4.1), every entry shape
(4, 6 and 7 fields), and argument redaction."""

from __future__ import annotations

import pytest
from conftest import SAMPLES

from yardstick.slowlog_parse import (
    parse_cli_json,
    parse_cli_noraw,
    parse_cli_raw_latency_history,
    parse_cli_raw_latency_latest,
    parse_cli_raw_slowlog,
    parse_entry,
    parse_latency_history,
    parse_latency_latest,
    parse_slowlog,
    redact,
)
from yardstick.tasks.slowlog import entry_row

VERSIONS = ["7.0.15", "7.4.1"]
SORT_ARGS = ("SORT", "l", "ALPHA", "LIMIT", "0", "10")


@pytest.mark.parametrize("version", VERSIONS)
def test_slowlog_samples_parse_alike_in_every_output_format(version):
    base = f"slowlog-get-redis-{version}"
    as_json = parse_slowlog(parse_cli_json((SAMPLES / f"{base}.json").read_text()))
    as_noraw = parse_slowlog(parse_cli_noraw((SAMPLES / f"{base}-noraw.txt").read_text()))
    as_raw = parse_slowlog(parse_cli_raw_slowlog((SAMPLES / f"{base}-raw.txt").read_text()))
    assert as_json == as_noraw == as_raw
    assert [e.entry_id for e in as_json] == [1, 0]  # newest first
    for entry in as_json:
        assert entry.entry_fields == 6
        assert entry.args == SORT_ARGS
        assert entry.command == "sort"
        assert entry.client_name == "probe"
        assert entry.client_addr.startswith("127.0.0.1:")
        # The capture ran SORT on 200,000 elements: tens of milliseconds, whatever the machine.
        assert entry.duration_us > 1000


@pytest.mark.parametrize("version", VERSIONS)
def test_latency_samples_parse_alike_in_every_output_format(version):
    base = f"latency-latest-redis-{version}-thr50"
    latest = [
        parse_latency_latest(parse_cli_json((SAMPLES / f"{base}.json").read_text())),
        parse_latency_latest(parse_cli_noraw((SAMPLES / f"{base}-noraw.txt").read_text())),
        parse_latency_latest(
            parse_cli_raw_latency_latest((SAMPLES / f"{base}-raw.txt").read_text())
        ),
    ]
    assert latest[0] == latest[1] == latest[2]
    (event,) = latest[0]
    assert event.event == "command" and event.latest_ms >= 50 and event.max_ms >= event.latest_ms

    hist = f"latency-history-command-redis-{version}-thr50"
    history = parse_latency_history(parse_cli_noraw((SAMPLES / f"{hist}-noraw.txt").read_text()))
    raw = parse_latency_history(
        parse_cli_raw_latency_history((SAMPLES / f"{hist}-raw.txt").read_text())
    )
    assert history == raw and history
    assert all(ms >= 50 for _, ms in history)
    assert (event.latest_at_s, event.latest_ms) == history[-1]


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_latency_samples_mean_no_events(version):
    """At threshold 100 ms the ~90 ms SORTs were not recorded: both outputs are empty."""
    noraw = (SAMPLES / f"latency-latest-redis-{version}-noraw.txt").read_text()
    raw = (SAMPLES / f"latency-latest-redis-{version}-raw.txt").read_text()
    assert parse_latency_latest(parse_cli_noraw(noraw)) == []
    assert parse_latency_latest(parse_cli_raw_latency_latest(raw)) == []


def test_four_field_entry_has_no_client():
    """Redis before 4.0 (and Redis Enterprise by default): id, time, duration, arguments."""
    entry = parse_entry([7, 1795990176, 12000, [b"KEYS", b"*"]])
    assert (entry.entry_fields, entry.client_addr, entry.client_name) == (4, None, None)
    assert entry.command == "keys"


def test_six_field_entry_with_unnamed_client():
    entry = parse_entry([3, 1795990176, 15598, [b"SCAN", b"0"], b"10.0.0.5:40000", b""])
    assert entry.entry_fields == 6
    assert entry.client_addr == "10.0.0.5:40000" and entry.client_name is None


def test_seven_field_entry_of_redis_8_10_counts_original_arguments():
    args = [b"SADD", b"s", *[b"m"] * 29, b"... (2 more arguments)"]
    entry = parse_entry([9, 1795990176, 20000, args, b"127.0.0.1:1", b"app", 33])
    assert entry.entry_fields == 7
    assert entry.arg_count_original == 33 and len(entry.args) == 32
    assert entry.client_name == "app"


def test_raw_cli_output_of_redis_8_10_keeps_the_argument_count_line_apart():
    # redis-cli prints the 7th field on a line of its own: one integer between the client
    # name and the next entry's id, time and duration (redis/redis#15347).
    args = ["SADD", "s", *["m"] * 29, "... (2 more arguments)"]
    raw = "\n".join([
        "9", "1795990176", "20000", *args, "127.0.0.1:1", "app", "33",
        "8", "1795990170", "15000", "GET", "127.0.0.1:1", "127.0.0.1:2", "", "3",
    ]) + "\n"
    first, second = parse_slowlog(parse_cli_raw_slowlog(raw))
    assert (first.entry_id, first.arg_count_original, first.client_name) == (9, 33, "app")
    assert len(first.args) == 32 and first.entry_fields == 7
    # An argument that looks like an address does not end the arguments early.
    assert second.args == ("GET", "127.0.0.1:1") and second.arg_count_original == 3
    assert second.client_addr == "127.0.0.1:2" and second.client_name is None


def test_seven_field_entry_of_redis_enterprise_puts_complexity_first():
    entry = parse_entry(
        [5, 1795990176, 30000, b"N:200000", [b"SORT", b"l", b"ALPHA"], b"1.2.3.4:5", b"job"]
    )
    assert entry.entry_fields == 7
    assert entry.complexity == "N:200000"
    assert entry.args == ("SORT", "l", "ALPHA") and entry.client_name == "job"


def test_container_commands_are_named_like_commandstats():
    entry = parse_entry([1, 1, 1, [b"CONFIG", b"GET", b"maxmemory"], b"a:1", b""])
    assert entry.command == "config|get"


def test_binary_arguments_do_not_break_parsing():
    entry = parse_entry([1, 1, 1, [b"SET", b"k", b"\xff\xfe"], b"a:1", b""])
    assert entry.args[2] == "\\xff\\xfe"


def test_redaction_keeps_command_key_and_options_and_replaces_values_by_length():
    assert redact(list(SORT_ARGS)) == list(SORT_ARGS)
    assert redact(["SET", "user:42", "alice@example.com", "EX", "60"]) == [
        "SET", "user:42", "<17 bytes>", "EX", "60",
    ]
    assert redact(["SCAN", "0", "MATCH", "article:*", "COUNT", "1000"]) == [
        "SCAN", "0", "MATCH", "article:*", "COUNT", "1000",
    ]
    assert redact(["HSET", "h", "name", "Alice"]) == ["HSET", "h", "<4 bytes>", "<5 bytes>"]
    assert redact(["AUTH", "s3cret"]) == ["AUTH", "<6 bytes>"]
    assert redact(["CONFIG", "SET", "maxmemory", "1gb"]) == [
        "CONFIG", "SET", "maxmemory", "<3 bytes>",
    ]
    assert redact(["EVAL", "return 1", "1", "k1", "secret"]) == [
        "EVAL", "return 1", "1", "k1", "<6 bytes>",
    ]


def test_redaction_counts_bytes_redis_truncated():
    """Redis keeps 128 bytes of a long argument and says how many more there were."""
    long_value = "x" * 128 + "... (872 more bytes)"
    assert redact(["SET", "k", long_value, "... (5 more arguments)"]) == [
        "SET", "k", "<1000 bytes>", "... (5 more arguments)",
    ]


def test_entry_rows_redact_unless_asked_to_keep():
    entry = parse_entry([1, 1795990176, 9, [b"SET", b"k", b"secret"], b"a:1", b"app"])
    redacted = entry_row(entry, "run-a", keep_args=False)
    kept = entry_row(entry, "run-a", keep_args=True)
    assert redacted["args"] == ["SET", "k", "<6 bytes>"] and redacted["args_redacted"]
    assert kept["args"] == ["SET", "k", "secret"] and not kept["args_redacted"]
    assert redacted["command"] == "set" and redacted["server_run_id"] == "run-a"
