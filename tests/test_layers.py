"""Imports go one way, down the layers named in yardstick/__init__.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first: the same order as yardstick/__init__.py's docstring.
# sql/ holds the dbt project (no Python beyond its package marker).
LAYERS = [
    "base",
    "access",
    "host",
    "tasks",
    "storage",
    "sql",
    "settings",
    "reports",
    "flows",
    "app",
]


def _layer_of_file(path: Path) -> str:
    """The layer a source file belongs to: its folder under yardstick/ (the import path)."""
    parts = path.relative_to(ROOT / "yardstick").parts
    layer = parts[0] if len(parts) > 1 else "base"
    assert layer in LAYERS, f"yardstick/{'/'.join(parts)} is in no layer"
    return layer


def _layer_of_module(name: str) -> str | None:
    """The layer of an imported module name (None: not the tool's own)."""
    parts = name.split(".")
    if parts[0] != "yardstick":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "base"


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module the file imports (function-local imports included), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from yardstick import interrupt` imports the module yardstick.interrupt.
            if node.module == "yardstick":
                found += [(node.lineno, f"yardstick.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


SOURCES = sorted((ROOT / "yardstick").rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_imports_go_down(path: Path) -> None:
    """No module imports from a layer above its own."""
    own = LAYERS.index(_layer_of_file(path))
    upward = [
        f"line {line}: {name} ({_layer_of_module(name)})"
        for line, name in _imports(path)
        if (layer := _layer_of_module(name)) is not None and LAYERS.index(layer) > own
    ]
    assert not upward, f"{_layer_of_file(path)} imports upward: " + "; ".join(upward)


def test_every_layer_is_a_folder() -> None:
    """The package holds no loose modules beyond the base ones."""
    loose = {p.name for p in (ROOT / "yardstick").glob("*.py")}
    assert loose == {"__init__.py", "engine.py", "errors.py", "interrupt.py", "locks.py"}


TASKS = sorted((ROOT / "yardstick" / "tasks").glob("*.py"))


@pytest.mark.parametrize("path", TASKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_measurement_modules_import_no_prefect(path: Path) -> None:
    """A family's function is plain Python: the flows make it a Prefect task."""
    found = [
        f"line {line}: {name}" for line, name in _imports(path) if name.split(".")[0] == "prefect"
    ]
    assert not found, "imports Prefect: " + "; ".join(found)


def test_the_measurement_layer_loads_no_prefect() -> None:
    """Every module of yardstick/tasks/, imported in a fresh process, brings no Prefect in."""
    import subprocess
    import sys

    probe = (
        "import importlib, pkgutil, sys; import yardstick.tasks as t; "
        "[importlib.import_module(f'yardstick.tasks.{m.name}') "
        " for m in pkgutil.iter_modules(t.__path__)]; "
        "print(sorted({n.split('.')[0] for n in sys.modules} & {'prefect'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
