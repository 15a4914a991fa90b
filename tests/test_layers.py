"""Imports go one way, down the layers named in yardstick/__init__.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first: the same order as yardstick/__init__.py's docstring.
LAYERS = ["base", "access", "host", "tasks", "storage", "settings", "reports", "flows", "app"]
FOLDERS = {
    "yardstick/access": "access",
    "yardstick/host": "host",
    "tasks": "tasks",
    "yardstick/storage": "storage",
    "yardstick/settings": "settings",
    "reports": "reports",
    "flows": "flows",
    "yardstick/app": "app",
}


def _layer_of_file(path: Path) -> str:
    """The layer a source file belongs to."""
    rel = path.relative_to(ROOT).as_posix()
    for folder, layer in FOLDERS.items():
        if rel.startswith(folder + "/"):
            return layer
    assert rel.startswith("yardstick/") and rel.count("/") == 1, f"{rel} is in no layer"
    return "base"


def _layer_of_module(name: str) -> str | None:
    """The layer of an imported module name (None: not the tool's own)."""
    parts = name.split(".")
    if parts[0] != "yardstick":
        return None
    if len(parts) == 1:
        return "base"
    if parts[1] in ("tasks", "reports", "flows"):
        return parts[1]
    if parts[1] in ("access", "host", "storage", "settings", "app"):
        return parts[1]
    return "base"


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


SOURCES = sorted(
    path
    for folder in ("yardstick", "tasks", "flows", "reports")
    for path in (ROOT / folder).rglob("*.py")
)


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
    assert loose == {"__init__.py", "engine.py", "errors.py", "interrupt.py"}
