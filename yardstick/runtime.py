"""Prefect settings for CLI runs: a project-local home, no analytics; set before Prefect loads."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_STATE_DIR = ".yardstick"


def configure_prefect(state_dir: str | Path = DEFAULT_STATE_DIR) -> Path:
    """Point Prefect at <state_dir>/prefect unless the user already chose a home or a server."""
    home = Path(state_dir).resolve() / "prefect"
    os.environ.setdefault("PREFECT_HOME", str(home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_CLI_PROMPT", "false")
    if not os.environ.get("PREFECT_API_URL"):
        # No server configured: run against a temporary local one that uses PREFECT_HOME.
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_ENABLED", "true")
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    return Path(os.environ["PREFECT_HOME"])
