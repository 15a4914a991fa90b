"""The collect flow as it was before it stopped creating task runs: every environment a
`measure-environment` task and each family a nested task (4 task runs per environment).

Kept for the benches only (bench/prefect_db.py, bench/collect_wall.py), to compare both
paths in one run; the deployed flow is yardstick/flows/collect.py. It imports the nightly module, as
the old flow did, so its import time is the old one too.
"""

from __future__ import annotations

import time

from prefect import flow
from prefect.states import Failed, State
from prefect.task_runners import ThreadPoolTaskRunner

from yardstick.flows.collect import COLLECT_FAMILIES, CollectSummary, collect_profile
from yardstick.flows.measure import measure_environments
from yardstick.flows.targets import environments
from yardstick.storage import delta
from yardstick.storage.lakefs import Lake


@flow(name="yardstick-collect", task_runner=ThreadPoolTaskRunner(max_workers=8), log_prints=True)
def collect_with_tasks(
    config_path: str | None = None,
    env_names: list[str] | None = None,
    lake_dir: str = "lake",
    keep_slowlog_args: bool = False,
) -> CollectSummary | State:
    """The old collection: one task run per environment and per family."""
    wall_start = time.perf_counter()
    profile = collect_profile(keep_slowlog_args)
    run_id = delta.new_run_id()
    with environments(config_path, env_names) as (envs, server_binary):
        outcomes = measure_environments(
            envs, profile, run_id, Lake.at(lake_dir), server_binary, families=COLLECT_FAMILIES
        )
    summary = CollectSummary(
        run_id=run_id,
        lake_dir=lake_dir,
        wall_s=time.perf_counter() - wall_start,
        outcomes=outcomes,
    )
    if summary.failed:
        names = ", ".join(f"{o.env} ({o.status})" for o in summary.failed)
        return Failed(message=f"environments not collected: {names}", data=summary)
    return summary
