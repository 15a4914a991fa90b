"""How the CLI prints a listing: a table on a terminal, plain aligned text when stdout is not
one (never cut to 80 columns), or CSV or JSON of the raw values for other programs."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


class Format(StrEnum):
    """--format choices."""

    table = "table"
    csv = "csv"
    json = "json"


@dataclass
class Listing:
    """Rows of named columns: `rows` the raw values (CSV, JSON), `shown` their text for a
    person (same shape; the raw values' text when None)."""

    columns: list[str]  # identifiers (started_utc): CSV's header, JSON's keys
    rows: list[Sequence[Any]]
    title: str | None = None
    shown: list[Sequence[str]] | None = None
    # Rich styles for a terminal's table, per row (None: plain).
    styles: list[str | None] = field(default_factory=list)
    # The table's headings for a person ("started (UTC)"); the identifiers when None.
    headings: list[str] | None = None

    def records(self) -> list[dict[str, Any]]:
        """The rows as {column: value}."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def plain(value: Any) -> Any:
    """A value JSON and CSV can carry: dates as ISO text, the rest as it is."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def to_json(value: Any) -> str:
    """JSON text of records or of an object of records."""
    return json.dumps(value, default=lambda v: plain(v) if plain(v) is not v else str(v))


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(to_json(value) + "\n")
    sys.stdout.flush()


def print_csv(listing: Listing) -> None:
    """A header line, then one line per row, on stdout."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(listing.columns)
    for row in listing.rows:
        writer.writerow(["" if v is None else plain(v) for v in row])
    sys.stdout.flush()


def _texts(listing: Listing) -> list[Sequence[str]]:
    if listing.shown is not None:
        return listing.shown
    return [["" if v is None else str(plain(v)) for v in row] for row in listing.rows]


def print_table(listing: Listing, console: Console) -> None:
    """A table for a person: rich's on a terminal (cells fold, never cut), else plain text
    in aligned columns as wide as their widest cell."""
    texts = _texts(listing)
    headings = listing.headings or listing.columns
    if console.is_terminal:
        table = Table(title=listing.title)
        for column in headings:
            table.add_column(column, overflow="fold")
        for i, row in enumerate(texts):
            style = listing.styles[i] if i < len(listing.styles) else None
            table.add_row(*(escape(cell) for cell in row), style=style)
        console.print(table)
        return
    widths = [
        max([len(column), *(len(row[i]) for row in texts)]) for i, column in enumerate(headings)
    ]
    lines = [] if listing.title is None else [listing.title]
    for row in [headings, *texts]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def print_listing(listing: Listing, fmt: Format, console: Console) -> None:
    """The listing in the chosen format."""
    if fmt is Format.json:
        print_json(listing.records())
    elif fmt is Format.csv:
        print_csv(listing)
    else:
        print_table(listing, console)


def say(console: Console, line: str) -> None:
    """A sentence for a person: on a terminal through rich, else as plain text (unwrapped)."""
    if console.is_terminal:
        console.print(escape(line), highlight=False, soft_wrap=True)
    else:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
