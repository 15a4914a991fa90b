"""Prefect settings for CLI runs: a project-local home, no analytics; set before Prefect loads."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

DEFAULT_STATE_DIR = ".yardstick"


def opt_out_of_telemetry() -> None:
    """Opt out of Prefect's SDK telemetry (and its first-run notice on a terminal), unless the
    user said otherwise: Prefect decides when it is first imported."""
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


# On import: the CLI imports this module before the families, which import prefect.
opt_out_of_telemetry()


def configure_prefect(state_dir: str | Path = DEFAULT_STATE_DIR, create: bool = True) -> Path:
    """Point Prefect at <state_dir>/prefect unless the user already chose a home or a server.

    Prefect reads these settings once, when it is first imported: call this before anything
    imports prefect (`create=False` sets them without making the folder yet)."""
    home = Path(state_dir).resolve() / "prefect"
    os.environ.setdefault("PREFECT_HOME", str(home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_CLI_PROMPT", "false")
    if not os.environ.get("PREFECT_API_URL"):
        # No server configured: run against a temporary local one that uses PREFECT_HOME.
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_ENABLED", "true")
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    if create:
        Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    else:
        # Prefect tries to make its home when imported and warns when the parent is missing;
        # the folder is made once the run is known to go ahead (a bad config lands nothing).
        warnings.filterwarnings("ignore", message="Failed to create the Prefect home directory")
    return Path(os.environ["PREFECT_HOME"])
