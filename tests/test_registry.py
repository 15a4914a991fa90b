"""The family registry: every family declares itself once, and everything else follows."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest
import yaml

from yardstick import tasks
from yardstick.flows.collect import COLLECT_FAMILIES, COLLECT_TABLES
from yardstick.flows.plan import FAMILIES, PHASES
from yardstick.settings.profiles import PROFILES, Profile
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import DETAIL_FAMILIES, TABLES
from yardstick.tasks.base import Family
from yardstick.tasks.registry import families

ROOT = Path(__file__).resolve().parent.parent
RUN_TABLES = {"runs", "steps", "retained_measures", "family_load", "tool_cost", "rebaselines"}


def test_every_family_module_declares_a_family():
    """Each module of tasks/ but the registry's own declares FAMILY, named after the module."""
    modules = {m.name for m in pkgutil.iter_modules(tasks.__path__)} - {"base", "registry"}
    declared = {
        m: getattr(__import__(f"yardstick.tasks.{m}", fromlist=["FAMILY"]), "FAMILY", None)
        for m in modules
    }
    assert all(isinstance(f, Family) for f in declared.values()), declared
    # One module, one family: the module is named after its family.
    for module, family in declared.items():
        assert family.name == module, module
    assert sorted(families()) == sorted(f.name for f in declared.values())


def test_plan_orders_by_phase_and_keeps_what_the_plan_promised():
    names = [f.name for f in FAMILIES]
    assert sorted(names) == sorted(families())
    assert [PHASES.index(f.phase) for f in FAMILIES] == sorted(
        PHASES.index(f.phase) for f in FAMILIES
    )
    assert names[0] == "fingerprint"
    # Collection reads the application's entries before any experiment or load writes.
    writers = [names.index(f.name) for f in FAMILIES if f.scratch_only]
    assert max(names.index(n) for n in COLLECT_FAMILIES) < min(writers)


def test_tables_come_from_the_declarations():
    declared = {t for f in families().values() for t in f.tables}
    assert set(TABLES) == declared | RUN_TABLES
    assert set(COLLECT_TABLES) == {"runs", "steps", "tool_cost"} | {
        t for f in families().values() if f.collected for t in f.tables
    }
    for table, family in DETAIL_FAMILIES.items():
        assert table in families()[family].tables


def test_every_table_is_a_dbt_source():
    """The SQL models read each lake table as the source raw_<table>: a table a family
    declares without its source line in sql/models/sources.yml would never reach a figure."""
    sources = yaml.safe_load((ROOT / "yardstick/sql/models/sources.yml").read_text())["sources"]
    names = {t["name"] for s in sources for t in s["tables"]}
    missing = sorted(f"raw_{t}" for t in TABLES if f"raw_{t}" not in names)
    assert not missing, f"add to yardstick/sql/models/sources.yml: {missing}"
    raw = {n.removeprefix("raw_") for n in names if n.startswith("raw_")}
    assert raw - set(TABLES) <= {"unfinished_runs"}  # kept by the warehouse itself


def test_profiles_hold_each_familys_settings_and_presets():
    with_settings = {n: f for n, f in families().items() if f.settings is not None}
    assert set(with_settings) <= set(Profile.model_fields)
    for name, profile in PROFILES.items():
        for family_name, family in with_settings.items():
            value = getattr(profile, family_name)
            assert isinstance(value, family.settings)
            assert value == family.presets.get(name, family.settings())
    assert PROFILES["quick"].family_timeout_s < PROFILES["nightly"].family_timeout_s


@pytest.mark.parametrize("name", sorted(families()))
def test_a_family_reads_its_settings_from_the_profile(name):
    """Params (the series key) name only settings the profile has, and serialise."""
    family = families()[name]
    for profile in PROFILES.values():
        asked = family.asked(profile)
        assert set(asked) <= set(Profile.model_fields) | {"interval_ms"}
        assert family.params_json(profile).startswith("{")


def test_a_hanging_family_fails_at_its_timeout_and_the_next_one_runs(tmp_path):
    """The profile's family_timeout_s, overridden per family by the environment, bounds every
    family: a hang is recorded as failed with its bound, and the plan goes on."""
    import time

    from yardstick import interrupt
    from yardstick.flows.landing import run_family
    from yardstick.settings.config import Environment
    from yardstick.tasks.base import Measured, RunContext

    def hang(env):
        while True:  # a family stuck in its own loop, as a frozen server would leave it
            interrupt.sleep(0.05)

    def instant(env):
        return Measured()

    declared = [
        Family(name=n, phase="load", measure=t, arguments=lambda e, p, c: (e,), tables={})
        for n, t in (("hangs", hang), ("after", instant))
    ]
    env = Environment(
        name="h", url="redis://127.0.0.1:1/0", mode="scratch", family_timeouts_s={"hangs": 0.5}
    )
    start = time.monotonic()
    steps = [
        run_family(
            f, env, PROFILES["quick"], RunContext(), "r1", Lake.at(str(tmp_path)), None, plain=True
        )
        for f in declared
    ]
    assert time.monotonic() - start < 30
    assert steps[0]["status"] == "failed" and "timed out" in steps[0]["reason"]
    assert "0.5 s" in steps[0]["reason"]
    assert steps[1]["status"] == "ok"
