"""An incremental warehouse and a full rebuild of the same lake render the same reports.

Two environments land a run each; the warehouse is updated; a second night only `a` lands
(an environment not in the last update: `b`); the warehouse is updated again, incrementally.
A full rebuild of the same lake and both warehouses' reports (reports/render.py) must agree
for every environment: a report reading a batch-only relation (stg_*) would lose `b`'s
sections in the incremental warehouse (tests/test_sql_layout.py checks the SQL for it; this
checks the pages). The runs carry the families whose report views were the batch's: round
trip (its chart), throughput with a failed cell, the SLOWLOG's lists, keyspace and the
latency monitor.
"""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lakes
import pytest

from yardstick.reports.render import render_reports
from yardstick.storage import warehouse
from yardstick.storage.lakefs import Lake

RECORDED = Path(__file__).parent / "samples" / "recorded_families.json"
FIRST_NIGHT = datetime(2025, 6, 1, 2, 0, tzinfo=UTC)
FAMILIES = ["fingerprint", "round_trip", "throughput", "slowlog", "keyspace", "latency_monitor"]
RECORDED_TABLES = (
    "keyspace_scans",
    "keyspace_keys",
    "keyspace_commandstats",
    "latency_collections",
)


def _land_night(lake_dir: Path, env: str, night: int, recording: dict) -> None:
    at = FIRST_NIGHT + timedelta(days=night)
    run = lakes.new_run(lake_dir, env, at, lakes.stable_run_id(at, env))
    lakes.runs_row(run, "nightly", duration_s=60.0)
    lakes.steps(run, {family: lakes.digest("nightly", family) for family in FAMILIES})
    lakes.fingerprint(run, "7.2.4")
    lakes.ping(run, rtt_us=50.0 + 10 * night, rng=random.Random(night))
    lakes.benchmark(
        run,
        [
            lakes.cell("SET", 1, 1, 4e4),
            lakes.cell("GET", 1, 1, 5e4),
            lakes.cell("GET", 1, 16, None, status="timeout", error="no answer in 2 s"),
        ],
    )
    # Each environment its own server; a night's read holds that night's 8 new entries.
    lakes.slowlog_collection(
        run, range(8 * night, 8 * night + 8), server_run_id=f"srv-{env}", duration_us=25_000
    )
    tables = {t: recording["tables"][t] for t in RECORDED_TABLES}
    lakes.recorded(run, tables, datetime.fromisoformat(recording["recorded_at"]))


def _pages(out: Path) -> dict[str, str]:
    """Every rendered file by path: markdown as text, charts by name only."""
    pages = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            rel = str(path.relative_to(out))
            pages[rel] = path.read_text() if path.suffix == ".md" else "(file)"
    return pages


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, dict[str, str]]:
    """The lake updated twice (the second night without `b`), and rebuilt in full: pages of each."""
    root = tmp_path_factory.mktemp("incremental-reports")
    lake_dir = root / "lake"
    recording = json.loads(RECORDED.read_text())
    for env in ("a", "b"):
        _land_night(lake_dir, env, 0, recording)
    assert warehouse.update(Lake.at(lake_dir), root / "inc.duckdb").mode == "full"
    _land_night(lake_dir, "a", 1, recording)
    second = warehouse.update(Lake.at(lake_dir), root / "inc.duckdb")
    assert second.mode == "incremental" and second.runs_added == 1, second
    con = warehouse.connect_read_only(root / "inc.duckdb")
    try:
        # The trap this guards against: the batch view holds `a`'s second night only.
        batch = con.execute("select distinct env from stg_benchmark").fetchall()
    finally:
        con.close()
    assert batch == [("a",)], batch
    warehouse.build(Lake.at(lake_dir), root / "full.duckdb")
    pages = {}
    for name in ("inc", "full"):
        render_reports(root / f"{name}.duckdb", root / name)
        pages[name] = _pages(root / name)
    return pages


def _masked(text: str) -> str:
    """The page without the moment it was rendered and the index's note of how the warehouse
    was last rebuilt (its provenance: the only text allowed to differ)."""
    text = re.sub(r"\n## History\n.*", "", text, flags=re.S)
    return re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?(\.\d+)?( ?UTC|Z|\+00:00)?", "<t>", text)


def test_both_warehouses_render_the_same_pages(rendered):
    assert set(rendered["inc"]) == set(rendered["full"])
    for page, text in rendered["full"].items():
        assert _masked(rendered["inc"][page]) == _masked(text), page


def test_the_environment_missing_from_the_last_update_keeps_its_sections(rendered):
    """What the comparison is worth: `b`'s page has the sections its batch-only views lost."""
    page = rendered["inc"]["b.md"]
    assert "no answer in 2 s" in page  # the failed benchmark cell
    assert "app:" in page  # the keyspace's prefixes and top keys
    assert "KEYS *" in page  # the SLOWLOG's slowest entries of the 24 h before the run
    assert any(p.startswith("charts/") and "b" in p for p in rendered["inc"]), rendered["inc"]
