"""The figure catalog (sql/seeds/figure_catalog.csv) is the one definition of a figure: its
name, family, unit, nature, why an absolute does not transfer, which direction is better and
which figures the key-ratio trend chart draws. Its users (reports, charts, the CLI, the
verdict events) name figures but take every fact about them from the catalog, through the
warehouse. Fast: no Redis, no dbt build (the seed is read as dbt types it)."""

from __future__ import annotations

import ast
import csv
import re
from pathlib import Path

import duckdb
import pytest
import yaml

from yardstick.reports import charts, render

REPO = Path(__file__).resolve().parents[1]
CATALOG = REPO / "yardstick" / "sql" / "seeds" / "figure_catalog.csv"
CATALOG_DOC = REPO / "yardstick" / "sql" / "seeds" / "figure_catalog.yml"
DBT_PROJECT = REPO / "yardstick" / "sql" / "dbt_project.yml"

# Where figures are used, never defined.
PYTHON_USERS = [
    *sorted((REPO / "yardstick" / "reports").glob("*.py")),
    REPO / "yardstick" / "app" / "cli.py",
    REPO / "yardstick" / "flows" / "announce.py",
]
TEMPLATE_USERS = sorted((REPO / "yardstick" / "reports" / "templates").rglob("*.j2"))

# What a figure's name looks like (its unit or kind last); report columns of the same shape
# (`p50_us`, `during_mean_us`) are not names of figures, so only the places a figure is
# named are searched (see _python_names and _template_names).
FIGURE_SHAPE = re.compile(
    r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*"
    r"_(?:us|ms|ns|bytes|ratio|share|speedup|rps|per_key|per_call|per_s|per_min)"
)
WORD = re.compile(r"[a-z][a-z0-9_]*")
SQL = re.compile(r"\b(?:select|from|where)\b", re.IGNORECASE)


def _catalog() -> list[dict[str, str]]:
    with CATALOG.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _names() -> set[str]:
    return {row["figure"] for row in _catalog()}


def _column_types() -> dict[str, str]:
    """The seed's columns as dbt types them (yardstick/sql/dbt_project.yml)."""
    project = yaml.safe_load(DBT_PROJECT.read_text())
    return project["seeds"]["yardstick"]["figure_catalog"]["+column_types"]


def _catalog_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory database holding `figure_catalog` as the warehouse's seed holds it."""
    con = duckdb.connect()
    con.execute(
        "create table figure_catalog as select * from read_csv(?, header = true,"
        " columns = ?, quote = '\"', escape = '\"')",
        [str(CATALOG), _column_types()],
    )
    return con


def _warehouse_columns() -> set[str]:
    """Names of the warehouse's columns (`... as name` in the models, and the columns their
    *.yml document): a row's `change_share` is a column, not a figure."""
    models = REPO / "yardstick" / "sql" / "models"
    columns = set()
    for sql in models.rglob("*.sql"):
        columns |= set(re.findall(r"\bas\s+([a-z][a-z0-9_]*)", sql.read_text(), re.IGNORECASE))
    for doc in models.rglob("*.yml"):
        columns |= set(re.findall(r"-\s+name:\s*([a-z][a-z0-9_]*)", doc.read_text()))
    return columns


def _python_names(path: Path) -> set[str]:
    """Figure names a Python file uses: a string that is one figure-shaped word, a quoted word
    in its SQL, and figure-shaped words of its other text (help, labels); a word naming a
    warehouse column and no figure is left out."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value
        if FIGURE_SHAPE.fullmatch(text):
            found.add(text)
        elif SQL.search(text):
            found |= {w for w in re.findall(r"'([a-z][a-z0-9_]*)'", text) if _shaped(w)}
        else:
            found |= {w for w in WORD.findall(text) if _shaped(w)}
    return {name for name in found if name in _names() or name not in _warehouse_columns()}


def _template_names(path: Path) -> set[str]:
    """Figure names a template uses: through the run's figures by name (`by_name` and the
    names it is bound to), through `catalog`, a figure picked by `selectattr("figure", ...)`,
    and a figure quoted in the text (`name`)."""
    text = path.read_text(encoding="utf-8")
    holders = {"by_name", "catalog"} | set(
        re.findall(r"{%-?\s*set\s+(\w+)\s*=\s*(?:\w+\.)?by_name\s*-?%}", text)
    )
    holder = "|".join(sorted(holders))
    found = set(re.findall(rf"\b(?:{holder})\.(?!get\b|items\b|keys\b|values\b)(\w+)", text))
    found |= set(re.findall(rf"\b(?:{holder})(?:\.get\(|\[)\s*[\"'](\w+)[\"']", text))
    found |= set(re.findall(rf"[\"'](\w+)[\"']\s+(?:not\s+)?in\s+(?:{holder})\b", text))
    found |= set(re.findall(r"selectattr\(\s*[\"']figure[\"']\s*,[^)]*[\"'](\w+)[\"']\s*\)", text))
    for quoted in re.findall(r"`([^`\s]+)`", text):
        if FIGURE_SHAPE.fullmatch(quoted):
            found.add(quoted)
        elif quoted.endswith("_*"):
            found.add(quoted)  # a family of names: `ks_prefix_*`
    return found


def _shaped(word: str) -> bool:
    return bool(FIGURE_SHAPE.fullmatch(word)) or word in _names()


def _unknown(found: set[str]) -> set[str]:
    names = _names()
    return {
        name
        for name in found
        if name not in names
        and not (name.endswith("_*") and any(n.startswith(name[:-1]) for n in names))
    }


def test_the_catalog_has_one_row_per_name_and_says_what_each_figure_is():
    rows = _catalog()
    names = [row["figure"] for row in rows]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    for row in rows:
        name = row["figure"]
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        assert row["family"], name
        assert row["position"].isdigit(), name
        assert row["unit"], name
        assert row["nature"] in ("absolute", "ratio"), name
        if row["nature"] == "absolute":
            assert row["not_transferable_because"].strip(), f"{name}: absolute, but says not why"
        else:
            assert not row["not_transferable_because"], f"{name}: a ratio transfers"
        assert row["better"] in ("", "lower", "higher"), name
        assert row["description"].strip(), name


def test_the_trend_chart_draws_ratios_in_the_catalogs_order():
    rows = _catalog()
    drawn = sorted((int(r["trend_chart"]), r["figure"]) for r in rows if r["trend_chart"])
    assert drawn, "the catalog marks no figure for the trend chart"
    orders = [order for order, _ in drawn]
    assert len(orders) == len(set(orders)), "two figures share a place on the trend chart"
    by_name = {r["figure"]: r for r in rows}
    # A move of a ratio is the signal; an absolute moves with the machine.
    assert [n for _, n in drawn if by_name[n]["nature"] != "ratio"] == []
    con = _catalog_connection()
    try:
        assert charts.trend_figures(con) == [name for _, name in drawn]
    finally:
        con.close()
    assert not hasattr(charts, "TREND_FIGURES"), "a list of its own beside the catalog"


def test_every_column_of_the_seed_is_typed_and_documented():
    with CATALOG.open(encoding="utf-8", newline="") as f:
        header = next(csv.reader(f))
    assert list(_column_types()) == header
    documented = yaml.safe_load(CATALOG_DOC.read_text())["seeds"][0]["columns"]
    assert [c["name"] for c in documented] == header


def test_templates_read_the_catalog_row_of_each_figure():
    con = _catalog_connection()
    try:
        catalog = render.figure_catalog(con)
    finally:
        con.close()
    assert set(catalog) == _names()
    row = catalog["client_over_server_ping"]
    assert (row["unit"], row["nature"], row["trend_chart"]) == ("×", "ratio", 1)
    assert render.quantity(48.2, "×") == "48.2×"
    assert render.quantity(72.3, "µs") == "72.3 µs"
    assert render.quantity(0.979, "share") == "97.9 %"
    assert render.quantity(None, "µs") == "n/a µs"


@pytest.mark.parametrize("path", PYTHON_USERS + TEMPLATE_USERS, ids=lambda p: p.name)
def test_every_figure_named_by_a_user_is_in_the_catalog(path):
    found = _python_names(path) if path.suffix == ".py" else _template_names(path)
    assert _unknown(found) == set(), f"{path.relative_to(REPO)} names figures not in the catalog"


def test_the_search_for_names_finds_the_figures_users_name():
    """The test above passes on nothing found: make sure it finds what is there."""
    found = {
        p.relative_to(REPO).as_posix(): (
            _python_names(p) if p.suffix == ".py" else _template_names(p)
        )
        for p in PYTHON_USERS + TEMPLATE_USERS
    }
    assert {"rtt_client_p50_us", "rtt_client_p99_us"} <= found["yardstick/reports/charts.py"]
    assert "rtt_client_p99_us" in found["yardstick/app/cli.py"]
    assert {
        "rtt_client_p50_us",
        "server_ping_usec_per_call",
        "client_over_server_ping",
    } <= found["yardstick/reports/templates/index.md.j2"]
    assert {"transport_rps_ratio", "transport_rps_lost_share"} <= found[
        "yardstick/reports/templates/sections/transport.md.j2"
    ]
    assert {"victim_wait_over_culprit_sort", "victim_during_over_after"} <= found[
        "yardstick/reports/templates/sections/contention.md.j2"
    ]
    assert "bench_host_busy_share" in found["yardstick/reports/templates/sections/throughput.md.j2"]
    # And a name not in the catalog is caught.
    assert _unknown({"rtt_client_p42_us", "ks_prefix_*"}) == {"rtt_client_p42_us"}


# How a ratio's description names its denominator; its label must name one too.
DENOMINATOR_WORDS = {"÷": ("÷",), " over ": (" over ", "÷"), " per ": (" per ", "÷")}


def test_every_figure_has_a_label_that_keeps_its_meaning():
    """Labels are written by hand (no cut of the description): every figure has one, no
    parenthesis is left open, and a ratio keeps the denominator its description states
    (a cut once left "SORT ... ALPHA LIMIT 0 10" of sort_limit_over_lrange_all)."""
    problems = []
    for row in _catalog():
        figure, label, description = row["figure"], row["label"].strip(), row["description"]
        if not label:
            problems.append(f"{figure}: no label")
            continue
        depth = 0
        for char in label:
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth < 0:
                break
        if depth != 0:
            problems.append(f"{figure}: unbalanced parentheses in {label!r}")
        if len(label) > 80:
            problems.append(f"{figure}: label over 80 characters ({len(label)})")
        if row["nature"] != "ratio":
            continue
        for word, kept in DENOMINATOR_WORDS.items():
            if word in description and not any(k in label for k in kept):
                problems.append(f"{figure}: {label!r} drops the denominator ({word.strip()})")
    assert not problems, "\n".join(problems)
    labels = {row["figure"]: row["label"] for row in _catalog()}
    assert labels["sort_limit_over_lrange_all"].endswith("÷ LRANGE 0 -1, same list")
    assert labels["ks_busy_share"].endswith("÷ wall time")
