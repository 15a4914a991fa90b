"""Collect flow: SLOWLOG, latency monitor and commandstats of every environment, every few
minutes. The SLOWLOG is a queue that forgets (128 entries by default): it has to be
collected, not consulted the next day. Read commands only, so read-only environments are
collected too (through the guard); nothing is built or rendered here, the nightly run
reports what the collections gathered."""

from __future__ import annotations

import time

from prefect import flow
from prefect.states import Failed, State
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel

from yardstick import lake
from yardstick.flows.nightly import measure_environments
from yardstick.flows.targets import environments
from yardstick.outcome import EnvOutcome
from yardstick.profiles import Profile, SlowlogProfile, get_profile

# The families a collection runs: each reads, none changes the server.
COLLECT_FAMILIES = ["slowlog", "latency_monitor", "counters"]
# Runs land with this profile name, which tells collections apart from measurement runs.
COLLECT_PROFILE = "collect"


class CollectSummary(BaseModel):
    """One collection: its run id, where it landed, and each environment's outcome."""

    run_id: str
    lake_dir: str
    wall_s: float
    outcomes: list[EnvOutcome]

    @property
    def failed(self) -> list[EnvOutcome]:
        """Environments whose collection did not complete."""
        return [o for o in self.outcomes if o.status != "ok"]


def collect_profile(keep_slowlog_args: bool = False) -> Profile:
    """The profile a collection records (only its SLOWLOG settings are used)."""
    return get_profile("quick").model_copy(
        update={"name": COLLECT_PROFILE, "slowlog": SlowlogProfile(keep_args=keep_slowlog_args)}
    )


@flow(name="yardstick-collect", task_runner=ThreadPoolTaskRunner(max_workers=8), log_prints=True)
def collect(
    config_path: str | None = None,
    env_names: list[str] | None = None,
    lake_dir: str = "lake",
    keep_slowlog_args: bool = False,
) -> CollectSummary | State:
    """Read SLOWLOG, latency monitor and commandstats of each environment into the lake."""
    wall_start = time.perf_counter()
    profile = collect_profile(keep_slowlog_args)
    run_id = lake.new_run_id()
    with environments(config_path, env_names) as (envs, server_binary):
        # Same rule as the nightly run: one server host is read by one thing at a time.
        outcomes = measure_environments(
            envs, profile, run_id, lake_dir, server_binary, families=COLLECT_FAMILIES
        )
    summary = CollectSummary(
        run_id=run_id, lake_dir=lake_dir, wall_s=time.perf_counter() - wall_start,
        outcomes=outcomes,
    )
    if summary.failed:
        names = ", ".join(f"{o.env} ({o.status})" for o in summary.failed)
        return Failed(message=f"environments not collected: {names}", data=summary)
    return summary


if __name__ == "__main__":
    collect()
