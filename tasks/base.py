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


def utc_now() -> datetime:
    """Current time, timezone-aware UTC (what the lake stores)."""
    return datetime.now(UTC)
