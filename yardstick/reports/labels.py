"""How a figure is named for people: its catalog description (sql/seeds/figure_catalog.csv),
shortened for a title or a table cell, and its unit as an axis or a column shows it."""

from __future__ import annotations

# Longer than this, a description's parenthesis (how it is measured) is left to the catalog.
MAX_LABEL_CHARS = 80
# First words that are abbreviations, kept as written rather than capitalised.
_KEEP_CASE = {"rps"}


def short_description(description: str | None, figure: str) -> str:
    """The catalog description's name part (before a colon's explanation), capitalised; the
    identifier itself when the catalog has none."""
    text = (description or "").strip()
    if not text:
        return figure
    # After ": " a description explains how to read the figure; a title needs its name.
    text = text.split(": ", 1)[0]
    if len(text) > MAX_LABEL_CHARS and " (" in text:
        text = text.split(" (", 1)[0]
    first = text.split(" ", 1)[0]
    # Identifiers (used_memory, p50) keep their case; words start a sentence.
    if first.isalpha() and first.islower() and first not in _KEEP_CASE:
        text = text[0].upper() + text[1:]
    return text


def unit_label(unit: str | None) -> str:
    """A catalog unit as a column or an axis shows it: shares are printed as percent."""
    if unit == "share":
        return "%"
    return unit or ""
