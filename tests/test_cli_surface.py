"""The `yardstick` command as any other CLI: --version, -h, choices in --help, and listings
as a table, plain text off a terminal (never cut), CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from importlib.metadata import version

from rich.console import Console
from typer.testing import CliRunner

from yardstick.app import cli, listing


def test_version_and_short_help():
    runner = CliRunner()
    result = runner.invoke(cli.app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"yardstick {version('redis-yardstick')}"
    result = runner.invoke(cli.app, ["-h"])
    assert result.exit_code == 0
    for command in ("run", "collect", "report", "trend", "changes"):
        assert command in result.stdout


def test_help_shows_choices_not_python_types():
    runner = CliRunner()
    for command in ("run", "collect", "trend", "changes"):
        result = runner.invoke(cli.app, [command, "-h"], env={"COLUMNS": "160"})
        assert result.exit_code == 0, result.output
        assert "list[" not in result.stdout and "<str>" not in result.stdout, result.stdout
        assert "table|csv|json" in result.stdout
    result = runner.invoke(cli.app, ["run", "-h"], env={"COLUMNS": "160"})
    assert "[nightly|quick]" in result.stdout and "--verbose" in result.stdout


def _sample() -> listing.Listing:
    long = ("an evidence column far wider than eighty columns of a terminal " * 2).strip()
    return listing.Listing(
        ["env", "when", "value", "note"],
        [["a", datetime(2026, 1, 2, 3, 4, tzinfo=UTC), 1.5, long], ["b", None, None, "x,y"]],
        title="sample",
    )


def test_listings_as_json_csv_and_uncut_plain_text(capsys):
    sample = _sample()
    listing.print_listing(sample, listing.Format.json, Console())
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["when"] == "2026-01-02T03:04:00+00:00" and rows[1]["value"] is None
    listing.print_listing(sample, listing.Format.csv, Console())
    parsed = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert parsed[0] == sample.columns and parsed[2][3] == "x,y"
    # Not a terminal (as under a pipe): plain text, each cell whole on one line.
    listing.print_listing(sample, listing.Format.table, Console(file=io.StringIO(), width=80))
    text = capsys.readouterr().out
    assert sample.rows[0][3] in text and "…" not in text
    # On a terminal: rich's table folds a long cell instead of cutting it.
    out = io.StringIO()
    listing.print_table(sample, Console(file=out, width=80, force_terminal=True))
    assert "…" not in out.getvalue()
