"""What a run reports back to its caller: one outcome per environment."""

from __future__ import annotations

from pydantic import BaseModel


class EnvOutcome(BaseModel):
    """How one environment's measurement ended."""

    env: str
    mode: str
    status: str  # ok | partial | failed | interrupted
    duration_s: float
    window_s: float
    error: str | None = None
    report: str | None = None
    # The servers the environment is made of, each measured on its own (flows/units.py).
    members: list[EnvOutcome] = []

    def with_members(self) -> list[EnvOutcome]:
        """This outcome, then its members'."""
        return [self.model_copy(update={"members": []}), *self.members]


class RunSummary(BaseModel):
    """The whole run: id, where things landed, and each environment's outcome."""

    run_id: str
    profile: str
    lake_dir: str
    warehouse_path: str
    out_dir: str
    wall_s: float
    outcomes: list[EnvOutcome]
    # What went wrong beside the environments (the lake full at compaction), one line each.
    problems: list[str] = []
    # Where a stop request (Ctrl-C, SIGTERM) found the run: "measuring", "warehouse" (its
    # update abandoned), "reports" (the warehouse updated, nothing rendered); None otherwise.
    stopped: str | None = None

    @property
    def failed(self) -> list[EnvOutcome]:
        """Environments that did not complete every family they should have."""
        return [o for o in self.outcomes if o.status != "ok"]
