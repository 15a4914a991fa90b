"""What the repository promises an operator beside the code: an environments file (with its
hosts and variable names) is never committed by accident, and the README says how long a
night takes, measured, on what."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_an_environments_file_is_ignored_by_git():
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "environments.yaml"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, "environments.yaml is not in .gitignore"
    # The example stays tracked.
    kept = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "examples/environments.yaml"],
        cwd=ROOT,
        check=False,
    )
    assert kept.returncode == 1


def test_the_readme_states_a_measured_nightly_duration():
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "--profile nightly" in text
    found = re.search(r"took (\d+) min (\d+) s", text)
    assert found, "the README gives no nightly duration"
    assert re.search(r"\d+-core", text), "the README's nightly duration names no machine"
