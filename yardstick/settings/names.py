"""The names a command line or an environments file may use (profiles, families), known
without importing the families, so that the CLI checks what it was given before anything heavy
loads (importing the families imports Prefect: seconds).

The families declare themselves (yardstick/tasks/, `FAMILY`); this module keeps only what the checks
need, and tests/test_cli_light.py fails, naming the difference, when it disagrees with them."""

from __future__ import annotations

# The built-in profiles and their wall-clock bound for one family on one environment (an
# environment's `family_timeouts_s` overrides it per family). The profiles themselves are
# composed from the families' presets (yardstick/settings/profiles.py).
FAMILY_TIMEOUTS_S = {"quick": 120.0, "nightly": 600.0}
PROFILE_NAMES = tuple(sorted(FAMILY_TIMEOUTS_S))

# Every family, in plan order (flows/plan.FAMILIES), and whether it writes to the server it
# measures (`scratch_only`: a read-only environment never gets it). A new family adds its line.
FAMILY_WRITES = {
    "fingerprint": False,
    "topology": False,
    "intrinsic": False,
    "round_trip": False,
    "counters": False,
    "latency_monitor": False,
    "slowlog": False,
    "agreement": True,
    "contention": True,
    "slow_commands": True,
    "memtier": True,
    "throughput": True,
    "transport": False,
    "keyspace": False,
    "memory": True,
}
