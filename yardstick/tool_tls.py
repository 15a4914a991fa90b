"""TLS options of the wrapped C tools (redis-benchmark, memtier_benchmark), from an
environment's `tls:` settings."""

from __future__ import annotations

from typing import Literal

from yardstick.config import Environment

ToolKind = Literal["redis-benchmark", "memtier_benchmark"]


def tls_args(env: Environment, tool: ToolKind) -> list[str]:
    """Command-line options that make `tool` speak TLS to `env` (none without rediss://)."""
    if not env.uses_tls:
        return []
    return ["--tls"]
