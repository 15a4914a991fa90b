"""The SQL project's layout keeps its promises (no warehouse is built here: files only).

- Every family of the registry (tasks/) has its folders, yardstick/sql/models/staging/<family>/ and
  yardstick/sql/models/marts/<family>/; every family with figures has its measures_<family> model,
  is in the measures union (measure_families() in yardstick/sql/macros/measures.sql) and has rows in
  the figure catalog; nothing in those is a family the registry does not know.
- Every other folder is a shared one named for what it holds, declared below.
- Each folder's models are described in the yml beside them; `data_tests:`, never `tests:`.
- Report views and the Python readers in reports/ read marts and report views only: never a
  batch view (stg_*), a batch table (raw_*) nor the batch's list (batch_runs, in_batch()),
  which hold only the last update's runs.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import yaml

from yardstick.tasks.registry import families

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "yardstick" / "sql" / "models"

# The families that give no figures, and why (the one place this is declared).
NO_FIGURES = {"fingerprint": "the environment's facts (marts/fingerprint/env_facts), not figures"}
# Folders that are no family's, by layer: what each holds.
SHARED = {
    "staging": {
        "runs": "the batch's runs and steps",
        "load": "the host's load through each family",
        "retention": "figures kept when a run's detail was dropped",
    },
    "marts": {
        "runs": "runs and steps across history",
        "load": "the host's load through each family, per run",
        "measures": "the measures union, figures, timed repetitions",
        "history": "trends, verdicts and the environment's history",
    },
    "reports": {
        "runs": "crashed runs",
        "load": "the host's load per run and family",
        "measures": "repetitions left out of the figures",
        "precision": "instrument floors",
        "comparison": "environments side by side",
        "history": "verdicts, what moved, figure history",
    },
}
# Relations a report view may read though named raw_*: state the warehouse keeps across
# updates (yardstick/storage/warehouse.py), not a batch.
NOT_BATCH = {"raw_unfinished_runs": "runs with files but no runs row, kept between updates"}


def _registry() -> set[str]:
    return set(families())


def _with_figures() -> set[str]:
    return _registry() - set(NO_FIGURES)


def _folders(layer: str) -> set[str]:
    return {p.name for p in (MODELS / layer).iterdir() if p.is_dir()}


def test_every_family_has_its_staging_and_marts_folders():
    for layer in ("staging", "marts"):
        missing = _registry() - _folders(layer)
        assert not missing, (
            f"yardstick/sql/models/{layer}/: no folder for families {sorted(missing)}"
        )


def test_every_folder_is_a_family_or_a_declared_shared_one():
    for layer in ("staging", "marts", "reports"):
        unknown = _folders(layer) - _registry() - set(SHARED[layer])
        assert not unknown, (
            f"sql/models/{layer}/: folders {sorted(unknown)} are no family of yardstick/tasks/ "
            "and not declared shared in tests/test_sql_layout.py"
        )


def test_the_measures_models_the_union_and_the_catalog_list_the_registry_families():
    expected = _with_figures()
    models = {p.stem.removeprefix("measures_") for p in MODELS.glob("marts/*/measures_*.sql")}
    assert models == expected, f"measures_<family> models {sorted(models ^ expected)} disagree"
    misplaced = [
        str(p.relative_to(MODELS))
        for p in MODELS.glob("marts/*/measures_*.sql")
        if p.parent.name != p.stem.removeprefix("measures_")
    ]
    assert not misplaced, f"measures_<family> outside marts/<family>/: {misplaced}"
    macro = (ROOT / "yardstick" / "sql" / "macros" / "measures.sql").read_text()
    body = re.search(r"macro measure_families\(\).*?return\(\[(.*?)\]\)", macro, re.S)
    assert body, "yardstick/sql/macros/measures.sql: no measure_families() list"
    union = set(re.findall(r"'(\w+)'", body.group(1)))
    assert union == expected, f"measure_families() {sorted(union ^ expected)} disagree"
    assert "measure_families()" in (MODELS / "marts" / "measures" / "measures.sql").read_text()
    with (ROOT / "yardstick" / "sql" / "seeds" / "figure_catalog.csv").open() as f:
        catalog = {row["family"] for row in csv.DictReader(f)}
    assert catalog == expected, f"figure_catalog families {sorted(catalog ^ expected)} disagree"


def _yml_entries() -> dict[Path, list[dict]]:
    return {
        p: (yaml.safe_load(p.read_text()) or {}).get("models") or []
        for p in MODELS.rglob("*.yml")
        if p.name != "sources.yml"
    }


def test_each_model_is_described_in_the_yml_beside_it():
    entries = _yml_entries()
    beside = {(p.parent, e["name"]) for p, es in entries.items() for e in es}
    models = {(p.parent, p.stem) for p in MODELS.rglob("*.sql")}
    stray = sorted(str(folder.relative_to(MODELS) / n) for folder, n in beside - models)
    assert not stray, f"yml entries with no model beside them: {stray}"
    undescribed = sorted(str(folder.relative_to(MODELS) / n) for folder, n in models - beside)
    assert not undescribed, f"models no yml beside them describes: {undescribed}"


def test_the_yml_says_data_tests_never_tests():
    found = [
        f"{p.relative_to(MODELS)}:{i}"
        for p in MODELS.rglob("*.yml")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.match(r"\s*(- )?tests:", line)
    ]
    assert not found, f"`tests:` (write `data_tests:`): {found}"


def _relations(sql: str) -> set[str]:
    """What a model reads: its refs, its sources, and the batch when it filters by it
    (the in_batch macro, yardstick/sql/macros/measures.sql, reads batch_runs)."""
    refs = re.findall(r"ref\(\s*['\"](\w+)['\"]\s*\)", sql)
    sources = re.findall(r"source\(\s*['\"]\w+['\"]\s*,\s*['\"](\w+)['\"]\s*\)", sql)
    batch = {"batch_runs"} if re.search(r"\bin_batch\(", sql) else set()
    return set(refs) | set(sources) | batch


def _batch(name: str) -> bool:
    batch = name.startswith(("stg_", "raw_")) or name == "batch_runs"
    return batch and name not in NOT_BATCH


def test_report_views_read_marts_and_report_views_only():
    found = {
        str(p.relative_to(MODELS)): sorted(r for r in _relations(p.read_text()) if _batch(r))
        for p in (MODELS / "reports").rglob("*.sql")
    }
    found = {k: v for k, v in found.items() if v}
    assert not found, f"report views reading batch relations (stg_*, raw_*): {found}"


def test_report_readers_in_python_read_no_batch_relation():
    readers = [
        *(ROOT / "yardstick" / "reports").glob("*.py"),
        *(ROOT / "yardstick" / "reports" / "templates").rglob("*"),
    ]
    found = {
        str(p.relative_to(ROOT)): sorted(
            {m for m in re.findall(r"\b((?:stg|raw)_\w+|batch_runs)", p.read_text()) if _batch(m)}
        )
        for p in readers
        if p.is_file()
    }
    found = {k: v for k, v in found.items() if v}
    assert not found, f"yardstick/reports/ reading batch relations (stg_*, raw_*): {found}"


def test_the_checks_see_a_batch_reference():
    """The two checks above find what they look for (else they would pass on anything)."""
    assert _relations("from {{ ref('stg_benchmark') }} join {{ source('lake', 'raw_runs') }}") == {
        "stg_benchmark",
        "raw_runs",
    }
    assert _relations("{{ in_batch(ref('slowlog_collection_gaps')) }}") == {
        "slowlog_collection_gaps",
        "batch_runs",
    }
    assert _batch("stg_ping_windows") and _batch("raw_runs") and not _batch("runs")
    assert _batch("batch_runs")
    assert not _batch("raw_unfinished_runs")
