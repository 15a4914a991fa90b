"""Parsers for Redis INFO text: sections of key:value lines, and commandstats counters."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyPercentile:
    """One percentile of one command from INFO latencystats (Redis 7.0+), in µs."""

    command: str
    percentile: float  # 50.0, 99.0, 99.9 …
    latency_us: float


@dataclass(frozen=True)
class CommandStat:
    """One `cmdstat_<command>` line: cumulative counters since the last reset or restart."""

    command: str
    calls: int
    usec: int
    rejected_calls: int
    failed_calls: int


def parse_info(text: str) -> dict[str, dict[str, str]]:
    """Split INFO output into {section: {key: raw value}}, sections lower-cased."""
    sections: dict[str, dict[str, str]] = {}
    current = sections.setdefault("", {})
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            current = sections.setdefault(line.lstrip("# ").strip().lower(), {})
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key] = value
    if not sections[""]:
        del sections[""]
    return sections


def parse_fields(value: str) -> dict[str, str]:
    """Split `a=1,b=2` (commandstats, latencystats, keyspace values) into a dict."""
    fields: dict[str, str] = {}
    for part in value.split(","):
        key, sep, val = part.partition("=")
        if sep:
            fields[key] = val
    return fields


def parse_modules(text: str) -> dict[str, str]:
    """Read INFO modules (`module:name=graph,ver=41603,api=1,...`, one line per module, all
    under the key `module`): {module name: its ver}. Redis 8 lists its built-in vectorset."""
    modules: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key == "module":
            fields = parse_fields(value)
            if fields.get("name"):
                modules[fields["name"]] = fields.get("ver", "")
    return modules


def parse_commandstats(text: str) -> list[CommandStat]:
    """Read INFO commandstats; subcommands keep Redis's `config|get` spelling."""
    stats = []
    for key, value in parse_info(text).get("commandstats", {}).items():
        if not key.startswith("cmdstat_"):
            continue
        fields = parse_fields(value)
        stats.append(
            CommandStat(
                command=key.removeprefix("cmdstat_"),
                calls=int(fields.get("calls", 0)),
                usec=int(fields.get("usec", 0)),
                # Absent before Redis 6.2.
                rejected_calls=int(fields.get("rejected_calls", 0)),
                failed_calls=int(fields.get("failed_calls", 0)),
            )
        )
    return stats


def parse_latencystats(text: str) -> list[LatencyPercentile]:
    """Read INFO latencystats (`latency_percentiles_usec_<cmd>:p50=…,p99=…`); [] before 7.0."""
    rows = []
    for key, value in parse_info(text).get("latencystats", {}).items():
        if not key.startswith("latency_percentiles_usec_"):
            continue
        command = key.removeprefix("latency_percentiles_usec_")
        for name, latency in parse_fields(value).items():
            rows.append(
                LatencyPercentile(
                    command=command, percentile=float(name.lstrip("p")), latency_us=float(latency)
                )
            )
    return rows
