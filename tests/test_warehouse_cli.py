"""The warehouse as a DuckDB user meets it: the duckdb CLI from PyPI (duckdb-cli 1.5, the
test extra) opens the file read-only, and the models' yml descriptions are DuckDB comments."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from lakes import benchmark, cell, fingerprint, new_run, runs_row, steps

from yardstick.storage import warehouse
from yardstick.storage.lakefs import Lake

# The CLI the README names: installed into the virtualenv by the test extra.
CLI = Path(sys.executable).with_name("duckdb")
# Models (and the seed) whose every column is described: the four first.
DESCRIBED = (
    "figures",
    "measures",
    "figure_trends",
    "verdicts",
    "changes",
    "runs",
    "steps",
    "latest_full_runs",
    "figure_catalog",
)
START = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)


def _cli(path: Path, sql: str) -> list[dict]:
    """Rows of `sql` run by the duckdb CLI on the file opened read-only (JSON output)."""
    done = subprocess.run(
        [str(CLI), "-readonly", "-json", str(path), "-c", sql],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout or "[]")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A warehouse of two throughput runs of one environment."""
    root = tmp_path_factory.mktemp("cli")
    for day in range(2):
        run = new_run(root / "lake", "alpha", START + timedelta(days=day))
        steps(run, ["throughput"])
        runs_row(run)
        fingerprint(run)
        benchmark(run, [cell("SET", 1, 1, 50_000.0), cell("SET", 1, 16, 400_000.0)])
    warehouse.build(Lake.at(root / "lake"), root / "w.duckdb")
    return root / "w.duckdb"


def test_pinned_cli_is_the_1_5_line():
    """The CLI in the virtualenv is the 1.5 line the README names (the file's storage version)."""
    version = subprocess.run([str(CLI), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("v1.5."), version.stdout


def test_cli_opens_the_warehouse_read_only(built):
    """The CLI reads figures from the file the tool wrote, without writing to it."""
    before = built.stat().st_mtime_ns
    rows = _cli(built, "select count(*) as n from marts.figures")
    assert rows[0]["n"] > 0
    assert built.stat().st_mtime_ns == before


def test_each_layer_is_a_schema(built):
    """Relations are found by layer: dbt's staging, marts and reports, the loader's batch in
    raw, the tool's state in yardstick, and nothing left in main."""
    rows = _cli(
        built,
        "select schema_name as s, table_name as name from duckdb_tables() "
        "union all select schema_name, view_name from duckdb_views() where not internal",
    )
    by_schema: dict[str, set[str]] = {}
    for row in rows:
        by_schema.setdefault(row["s"], set()).add(row["name"])
    assert set(by_schema) == {"raw", "staging", "marts", "reports", "yardstick"}
    assert {"figures", "figure_trends", "runs", "figure_catalog"} <= by_schema["marts"]
    assert all(name.startswith("stg_") for name in by_schema["staging"])
    assert {"verdicts", "report_changes"} <= by_schema["reports"]
    assert {"raw_runs", "batch_runs", "raw_unfinished_runs"} <= by_schema["raw"]
    assert {"meta", "loaded_runs"} <= by_schema["yardstick"]
    # With the tool's search path, a user leaves the schema out.
    path = "set search_path = 'reports,marts,staging,raw,yardstick'; "
    assert _cli(built, path + "select count(*) as n from verdicts")[0]["n"] == 1


def test_models_carry_their_descriptions(built):
    """Each described model has a comment, and so has every one of its columns (figures first:
    the issue's test), read through the CLI as a DuckDB user reads them."""
    relations = _cli(
        built,
        "select table_name as name, comment from duckdb_tables() "
        "union all select view_name, comment from duckdb_views()",
    )
    comments = {row["name"]: row["comment"] for row in relations}
    columns = _cli(
        built,
        "select table_name, column_name, comment from duckdb_columns() "
        f"where table_name in {DESCRIBED!r}",
    )
    for model in DESCRIBED:
        assert (comments.get(model) or "").strip(), f"{model} has no comment"
        named = [row for row in columns if row["table_name"] == model]
        assert named, f"{model} has no columns"
        bare = [row["column_name"] for row in named if not (row["comment"] or "").strip()]
        assert not bare, f"{model} columns without a comment: {bare}"


def test_the_readme_says_which_warehouse_objects_carry_a_comment(built):
    """The README once said every column carries a comment (259 of 2,424 did): what it says
    now holds. Every marts table and every reports and staging view has one; columns only
    where their model's yml describes them, which the README does not hide."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    relations = _cli(
        built,
        "select schema_name as s, table_name as name, comment from duckdb_tables() "
        "where schema_name = 'marts' union all "
        "select schema_name, view_name, comment from duckdb_views() "
        "where schema_name in ('reports', 'staging')",
    )
    bare = [f"{r['s']}.{r['name']}" for r in relations if not (r["comment"] or "").strip()]
    assert relations and not bare, bare
    columns = _cli(
        built,
        "select count(*) as n, count(comment) as commented from duckdb_columns() "
        "where schema_name in ('marts', 'reports')",
    )[0]
    if columns["commented"] < columns["n"]:
        assert "every table and column carries" not in " ".join(readme.lower().split())
        assert "columns carry one" in " ".join(readme.split())
