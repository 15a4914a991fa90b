"""Helpers the bench scripts share (a module beside them, not a package)."""

from __future__ import annotations

import shutil
from pathlib import Path


def copy_sql(work: Path) -> Path:
    """A copy of the dbt project as it is now (target/ and logs/ left out), so a bench's dbt
    state never meets the tests' or the tool's."""
    from yardstick.storage import dbt

    target = work / "sql"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(
        dbt.project_dir(), target, ignore=shutil.ignore_patterns("target", "logs", "__pycache__")
    )
    return target
