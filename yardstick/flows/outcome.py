"""What a run reports back to its caller: one outcome per environment."""

from __future__ import annotations

from pydantic import BaseModel

from yardstick.interrupt import RunEnding


class EnvOutcome(BaseModel):
    """How one environment's measurement ended."""

    env: str
    mode: str
    status: str  # ok | partial | failed | interrupted
    duration_s: float
    window_s: float
    error: str | None = None
    report: str | None = None
    # Rows landed per lake table by its families (runs and steps not counted).
    landed_rows: dict[str, int] = {}
    # The servers the environment is made of, each measured on its own (yardstick/flows/units.py).
    members: list[EnvOutcome] = []
    # False when its run's record (steps, runs) could not be landed: the warehouse and the
    # reports never see this run, so the index and comparison name it from here (`error`).
    landed: bool = True

    def with_members(self) -> list[EnvOutcome]:
        """This outcome, then its members'."""
        return [self.model_copy(update={"members": []}), *self.members]


def not_landed_of(outcomes: list[EnvOutcome]) -> list[dict]:
    """The environments whose run did not land, and why, as the index and comparison list
    them (env, mode, status, why)."""
    return [
        {
            "env": o.env,
            "mode": o.mode,
            "status": o.status,
            "why": (o.error or "").removeprefix("not landed: ") or "no reason recorded",
        }
        for o in outcomes
        if not o.landed
    ]


class RunSummary(BaseModel):
    """The whole run: id, where things landed, and each environment's outcome."""

    run_id: str
    profile: str
    lake_dir: str  # the lake's URI
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


class RunEnded(RunEnding):  # noqa: N818 (a run's ending, not an error of the code)
    """A run that ended Failed or Cancelled, with its summary: Prefect turns a failed or
    cancelled state's data into an exception (a summary there made its engine log a
    TypeError traceback), so the summary travels inside one. It reads as the summary
    (`ended.outcomes`), so callers of `state.result(raise_on_failure=False)` need no change.
    The engine's "unexpected exception" record of it is dropped (interrupt.RunEnding)."""

    def __init__(self, message: str, summary: BaseModel | None = None) -> None:
        super().__init__(message)
        self.summary = summary

    def __getattr__(self, name: str):
        # Only for names an exception lacks; never during unpickling (no summary yet).
        if name.startswith("__") or name == "summary":
            raise AttributeError(name)
        return getattr(self.summary, name)


def summary_of(result: object) -> object:
    """A flow's summary from `state.result(raise_on_failure=False)`, whether it ended
    Completed, Failed or Cancelled (any other exception is returned as it is)."""
    return result.summary if isinstance(result, RunEnded) else result
