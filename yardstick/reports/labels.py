"""How a figure is named for people: its catalog label (sql/seeds/figure_catalog.csv, a short
name written by hand for each figure), and its unit as an axis or a column shows it."""

from __future__ import annotations

import csv
import functools
from importlib.resources import files


@functools.cache
def _labels() -> dict[str, str]:
    """figure -> label, from the packaged catalog seed (read once)."""
    seed = files("yardstick.sql").joinpath("seeds", "figure_catalog.csv")
    with seed.open(encoding="utf-8", newline="") as f:
        return {row["figure"]: row["label"] for row in csv.DictReader(f)}


def figure_label(figure: str) -> str:
    """The figure's catalog label; the identifier itself for a figure the catalog lacks."""
    return _labels().get(figure) or figure


def unit_label(unit: str | None) -> str:
    """A catalog unit as a column or an axis shows it: shares are printed as percent."""
    if unit == "share":
        return "%"
    return unit or ""
