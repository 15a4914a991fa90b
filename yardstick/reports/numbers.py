"""Numbers for people, as the reports and the CLI's listings print them (no template engine,
no warehouse: `yardstick trend` and `changes` import this alone)."""

from __future__ import annotations

from typing import Any


def fmt(value: Any, unit: str | None = None) -> str:
    """A number for people: 3 significant digits, thousands separators, shares as percent."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if unit == "share":
        return f"{value * 100:.1f} %"
    magnitude = abs(value)
    if magnitude >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"
