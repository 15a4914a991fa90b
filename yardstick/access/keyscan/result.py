"""What a scan is given and gives back: its budget, its result (each key's readings, how it
ended, what it cost), its error, and the INFO commandstats of its own commands."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import redis

from yardstick.access.info import CommandStat, parse_commandstats

# Commands whose INFO commandstats counters are the scan's own commands. Redis before 7.0
# counts MEMORY and OBJECT subcommands together under the container name.
OWN_COMMANDS = frozenset(
    {
        "scan",
        "type",
        "memory|usage",
        "memory",
        "object|encoding",
        "object",
        "strlen",
        "llen",
        "hlen",
        "scard",
        "zcard",
        "xlen",
    }
)


class ScanError(redis.exceptions.RedisError):
    """The server answered SCAN with an error, or the reply stream made no sense."""


@dataclass(frozen=True)
class ScanBudget:
    """What the scan may cost: keys sampled, a share of the server's CPU, wall time."""

    max_keys: int
    cpu_share: float
    max_wall_s: float


@dataclass
class ScanResult:
    """Every key sampled (columns; grouping by prefix is the caller's), how the scan ended,
    what it cost the server and what it did to the keys' clocks."""

    keys: list[bytes] = field(default_factory=list)
    types: list[str | None] = field(default_factory=list)
    encodings: list[str | None] = field(default_factory=list)
    elements: list[int | None] = field(default_factory=list)
    memory_usage_bytes: list[int | None] = field(default_factory=list)
    stop_reason: str = "complete"  # complete | key_cap | time_cap
    wall_s: float = 0.0
    paused_s: float = 0.0
    rounds: int = 0
    scan_calls: int = 0  # pages asked (each one plain SCAN, or typed SCANs, or both)
    commands: int = 0  # commands sent in the scan's rounds (markers and INFO included)
    duplicates: int = 0  # readings dropped: keys SCAN returned more than once (it may)
    vanished: int = 0  # keys gone between SCAN and their last command
    wrongtype: int = 0  # length commands answered WRONGTYPE: the key changed type meanwhile
    errors: Counter = field(default_factory=Counter)  # error replies per command
    first_error: str | None = None
    # What the scan did to the keys' LRU/LFU clocks: "no-touch" (CLIENT NO-TOUCH ON, element
    # counts read), "skipped" (no length command sent: elements NULL), "touched" (length
    # commands sent without NO-TOUCH: `keys_touched` clocks reset).
    touch_mode: str = "skipped"
    touch_note: str | None = None  # why CLIENT NO-TOUCH was not used
    keys_touched: int = 0
    # Lookups counted in INFO keyspace_hits/misses: TYPE, OBJECT ENCODING, length commands, and
    # before Redis 7.2 every key a typed SCAN walked (7.2+: each key it returned; Valkey: none).
    keyspace_lookups: int = 0
    # Where the types came from: scan (typed SCAN pages), scan+type (the most common type by a
    # typed SCAN, TYPE for the rest) or encoding (OBJECT ENCODING, TYPE where it is shared).
    type_source: str = "encoding"
    typed_scan_calls: int = 0  # SCAN ... TYPE t commands sent (scan_calls counts pages)
    type_fallback_pages: int = 0  # pages whose typed SCANs' cursors differed: TYPE asked
    encoding_every: int = 1  # after the first ENCODING_FIRST_KEYS, one key in this many
    encodings_read: int = 0  # keys whose OBJECT ENCODING was read (top keys included)
    server_version: str | None = None
    # The server's CPU (INFO used_cpu_sys + used_cpu_user, all clients) at the scan's start and
    # end; the rate before the scan, taken as other clients' and subtracted from the scan's.
    cpu_start_s: float | None = None
    cpu_end_s: float | None = None
    baseline_cpu_share: float | None = None
    baseline_window_s: float | None = None
    # The server process's CPU from /proc (prober on the server's host), over the scan.
    process_cpu_s: float | None = None
    # Highest share of the server's CPU the scan took over one burst window (≥ BURST_WINDOW_S
    # between two readings), that window's length, and the longest run of windows over budget.
    cpu_peak_share: float | None = None
    cpu_peak_window_s: float | None = None
    over_budget_longest_s: float | None = None
    own_before: list[CommandStat] = field(default_factory=list)
    own_after: list[CommandStat] = field(default_factory=list)

    @property
    def cpu_s(self) -> float | None:
        """Server CPU seconds the scan cost (its counters' difference less the baseline)."""
        if self.cpu_start_s is None or self.cpu_end_s is None:
            return None
        baseline = (self.baseline_cpu_share or 0.0) * self.wall_s
        return max(0.0, self.cpu_end_s - self.cpu_start_s - baseline)


def own_stats(client: redis.Redis) -> list[CommandStat]:
    """INFO commandstats counters of the scan's own commands."""
    return [s for s in parse_commandstats(client.info("commandstats")) if s.command in OWN_COMMANDS]


def own_usec(stats: list[CommandStat]) -> int:
    """Server microseconds spent in the scan's own commands (cumulative counter)."""
    return sum(s.usec for s in stats)
