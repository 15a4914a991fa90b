"""What every measurement task returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa


@dataclass
class Measured:
    """Tables produced by one family on one environment, and time spent inside its windows."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    window_s: float = 0.0
    # Parts that failed while the rest was measured (e.g. a benchmark cell that timed out):
    # the tables still land, the step is marked failed with these reasons.
    problems: list[str] = field(default_factory=list)
    # What the family did beside measuring that the report must say (e.g. what it cleaned
    # up after a killed run); the step stays ok.
    notes: list[str] = field(default_factory=list)


class Skipped(Exception):
    """A family that cannot apply to this environment in this run (recorded as skipped)."""


def utc_now() -> datetime:
    """Current time, timezone-aware UTC (what the lake stores)."""
    return datetime.now(UTC)
