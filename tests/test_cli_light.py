"""The commands that answer at once (issue 36): `-h`, `--version`, each command's `-h`, a bad
environments file or flag, `trend` and `changes` import neither Prefect nor dbt nor a
measurement family nor a flow (nor matplotlib, jinja2, deltalake), each run in a fresh process
as a user runs it; a refusal is one line and exit 2. Their time is bench/cli_latency.py's."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = (
    "prefect",
    "dbt",
    "yardstick.tasks",
    "yardstick.flows",
    "matplotlib",
    "jinja2",
    "deltalake",
    # Change points are reports/pelt.py's (numpy): no ruptures, no scipy (a second of CPU).
    "ruptures",
    "scipy",
)
# Runs the CLI as the `yardstick` script does, then lists what it imported (argv[1]: where).
CHILD = """
import sys
listing = sys.argv.pop(1)
sys.argv[0] = "yardstick"
try:
    from yardstick.app.cli import app
    app(prog_name="yardstick")
finally:
    with open(listing, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
"""


def yardstick(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """One `yardstick` command in a fresh process without Prefect settings inherited: its
    result and the modules it imported."""
    listing = cwd / ".modules"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(listing), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    modules = set(listing.read_text().split())
    listing.unlink()
    return proc, modules


def heavy(modules: set[str]) -> list[str]:
    """The forbidden module families among `modules`."""
    return sorted({f for f in FORBIDDEN for m in modules if m == f or m.startswith(f + ".")})


def one_line_refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The refusal's line, after checking it is one line, exit 2, no traceback."""
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["-h"],
        ["--version"],
        *(
            [*command, "-h"]
            for command in (
                ["run"],
                ["collect"],
                ["report"],
                ["compact"],
                ["check"],
                ["trend"],
                ["changes"],
                ["lake", "migrate"],
            )
        ),
    ],  # fmt: skip
    ids=" ".join,
)
def test_help_and_version_import_nothing_heavy(tmp_path, args):
    proc, modules = yardstick(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert not heavy(modules)
    assert list(tmp_path.iterdir()) == []


ENV = "    url: redis://127.0.0.1:1/0\n"
BAD_FILES = {
    "unknown field": (
        f"environments:\n  - name: a\n{ENV}    mode: scratch\n    colour: red\n",
        "environment 'a', field 'colour': unknown field",
    ),
    "not yaml": ("environments:\n  - name: a\n    url: [oops\n", "not valid YAML at line"),
    "unknown family": (
        f"environments:\n  - name: a\n{ENV}    mode: scratch\n    families: [nosuch]\n",
        "environment 'a', field 'families': no family 'nosuch' (known: fingerprint,",
    ),
    "writer on read-only": (
        f"environments:\n  - name: a\n{ENV}    mode: read-only\n    families: [throughput]\n",
        "environment 'a', field 'families': throughput writes to the server",
    ),
    "family timeout": (
        f"environments:\n  - name: a\n{ENV}    mode: scratch\n"
        "    family_timeouts_s: {memtier: 0}\n",
        "field 'family_timeouts_s.memtier': must be above 0 (got 0)",
    ),
    "missing secret": (
        f"environments:\n  - name: a\n{ENV}    mode: read-only\n"
        "    password_env: YARDSTICK_TEST_UNSET_SECRET\n",
        "environment 'a', field 'password_env': variable YARDSTICK_TEST_UNSET_SECRET is not set",
    ),
}


@pytest.mark.parametrize("command", ["run", "collect"])
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_environments_file_is_one_light_line(tmp_path, command, case):
    content, says = BAD_FILES[case]
    config = tmp_path / "envs.yaml"
    config.write_text(content)
    paths = ["--lake", str(tmp_path / "lake"), "--state-dir", str(tmp_path / "state")]
    if command == "run":
        paths += ["--warehouse", str(tmp_path / "w.duckdb"), "--out", str(tmp_path / "out")]
    proc, modules = yardstick(tmp_path, command, "--config", str(config), *paths)
    line = one_line_refusal(proc)
    assert line.startswith(f"error: {config}: ") and says in line, line
    assert not heavy(modules)
    # Checked before anything was created.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["envs.yaml"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["run", "--profile", "weekly"],
            "--profile: unknown profile 'weekly' (choose nightly, quick)",
        ),
        (["run", "--env", "prod"], "--env: no environment 'prod' without --config"),
        (["run", "--bogus"], "No such option: --bogus"),
        (["collect", "--format", "xml"], "'xml' is not one of"),
        (["trend", "--env", "a"], "Missing option '--figure'"),
        (["changes", "--nope"], "No such option: --nope"),
        (["nosuch"], "No such command 'nosuch'"),
        (["compact", "--detail-days", "0"], "--detail-days: must be at least 1 (got 0)"),
        (["report", "--warehouse", "."], "is a directory"),
        (["check", "--warehouse", "none.duckdb"], "none.duckdb: no warehouse yet"),
        (
            ["trend", "--env", "a", "--figure", "b", "--warehouse", "none.duckdb"],
            "no warehouse yet",
        ),
        (["changes", "--warehouse", "none.duckdb"], "none.duckdb: no warehouse yet"),
    ],  # fmt: skip
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_a_bad_flag_is_one_light_line(tmp_path, args, says):
    proc, modules = yardstick(tmp_path, *args)
    assert says in one_line_refusal(proc)
    assert not heavy(modules)
    assert list(tmp_path.iterdir()) == []


def _bench():
    """bench/cli_latency.py as a module (its warehouse builder), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "bench_cli_latency", REPO / "bench" / "cli_latency.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A warehouse of 9 nights of one environment, its round trip stepping up (bench's)."""
    return _bench().build_warehouse(tmp_path_factory.mktemp("light-warehouse"), nights=9)


@pytest.mark.e2e
def test_trend_and_changes_on_a_built_warehouse_are_light(tmp_path, built):
    bench = _bench()
    trend = ["trend", "--env", bench.ENV, "--figure", bench.FIGURE, "--warehouse", str(built)]
    proc, modules = yardstick(tmp_path, *trend)
    assert proc.returncode == 0, proc.stderr
    assert f"{bench.FIGURE} on {bench.ENV}" in proc.stdout and "change point" in proc.stdout
    assert not heavy(modules)
    proc, modules = yardstick(tmp_path, *trend, "--format", "json")
    assert proc.returncode == 0 and proc.stdout.startswith("{"), proc.stderr
    proc, modules = yardstick(tmp_path, "changes", "--all", "--warehouse", str(built))
    assert proc.returncode in (0, 1), proc.stderr
    assert f"{bench.ENV}:" in proc.stdout
    assert not heavy(modules)
    # A wrong name is one line, light too.
    proc, modules = yardstick(tmp_path, "trend", "--env", "nope", "--figure", bench.FIGURE,
                              "--warehouse", str(built))  # fmt: skip
    assert "--env: no environment 'nope'" in one_line_refusal(proc)
    assert not heavy(modules)


def test_the_light_names_are_the_families_own():
    """What the CLI checks without importing the families is what they declare."""
    from yardstick.flows.plan import FAMILIES
    from yardstick.settings import names
    from yardstick.settings.profiles import PROFILES

    declared = {f.name: f.scratch_only for f in FAMILIES}
    assert list(names.FAMILY_WRITES.items()) == list(declared.items()), (
        "yardstick/settings/names.py FAMILY_WRITES must list every family of tasks/ in plan "
        f"order with its scratch_only: {declared}"
    )
    assert names.PROFILE_NAMES == tuple(sorted(PROFILES))
    assert all(set(f.presets) <= set(names.PROFILE_NAMES) for f in FAMILIES)
