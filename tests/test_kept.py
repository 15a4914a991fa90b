"""A new warehouse starts no dbt once another warehouse of the same key was built
(yardstick/storage/kept.py): it copies the kept empty warehouse and replays the kept plan, and
its marts are those dbt itself builds. A kept file that does not open is dropped, and dbt
builds. (Another key, such as changed models, finds nothing kept: the key is plan.key's.)"""

from __future__ import annotations

import pytest
import test_golden_figures as golden
from test_warehouse_incremental import _tables, assert_same_marts

from yardstick.storage import kept, warehouse
from yardstick.storage.lakefs import Lake

pytestmark = [pytest.mark.server_agnostic]

NIGHTS = 2


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A dbt cache of this module's own (nothing kept yet), the golden lake, and a first
    warehouse built from it: (cache, lake, the first warehouse's marts)."""
    root = tmp_path_factory.mktemp("kept")
    lake_dir = root / "lake"
    golden.land_nights(lake_dir, NIGHTS)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("YARDSTICK_DBT_STATE", str(root / "dbt-state"))
        built = warehouse.build(Lake.at(lake_dir), root / "a" / "w.duckdb")
        yield root / "dbt-state", lake_dir, _tables(built)


def test_a_second_warehouse_copies_and_replays_and_equals_dbts(first, tmp_path):
    cache, lake_dir, marts = first
    assert list((cache / "templates").glob("*.duckdb")), "the first build kept no template"
    assert list((cache / "plans").glob("*.json")), "the first build kept no plan"

    result = warehouse.update(Lake.at(lake_dir), tmp_path / "w.duckdb", full=True)
    assert result.mode == "full"
    # Every step said how it went: a copy, then the recorded plan replayed.
    assert "copied" in result.parse_mode and "replayed" in result.parse_mode, result.parse_mode
    assert "plan recorded" not in result.parse_mode, result.parse_mode
    assert_same_marts(_tables(result.path), marts)


def test_a_kept_template_that_does_not_open_is_dropped_and_dbt_builds(first, tmp_path):
    cache, lake_dir, marts = first
    (template,) = (cache / "templates").glob("*.duckdb")
    template.write_bytes(b"not a duckdb file" * 100)

    result = warehouse.update(Lake.at(lake_dir), tmp_path / "w.duckdb", full=True)
    assert "copied" not in result.parse_mode, result.parse_mode
    assert_same_marts(_tables(result.path), marts)
    # dbt's build replaced the damaged file with a good one.
    assert kept.template(template.stem) is not None
    assert template.read_bytes()[:17] != b"not a duckdb file"
