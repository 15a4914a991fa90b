"""Measure environments: host groups side by side, the environments of a group one after
another (task runs in a flow run, threads of this process otherwise)."""

from __future__ import annotations

import signal

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture
from prefect.utilities.annotations import quote

from yardstick import engine, interrupt
from yardstick.flows.landing import run_logger, task_run_label
from yardstick.flows.outcome import EnvOutcome
from yardstick.flows.plan import each_host_group, families_for, host_group_label, host_groups
from yardstick.flows.units import measure_units
from yardstick.settings.config import Environment
from yardstick.settings.profiles import Profile
from yardstick.storage import cursors
from yardstick.storage.lakefs import Lake
from yardstick.tasks.base import RunContext

# How long an interrupted run waits for its families to restore the servers and land.
STOP_GRACE_S = 30.0


@task(name="measure-environment", cache_policy=NO_CACHE)
def measure_environment(
    env: Environment,
    profile: Profile,
    run_id: str,
    lake: Lake,
    host_group: str,
    server_binary: dict[str, str] | None = None,
    families: list[str] | None = None,
    peers: dict[str, Environment] | None = None,
) -> EnvOutcome:
    """Run each applicable family (all, or those named) on one environment and land its
    tables; never raises."""
    # The collected families land only what the lake does not hold yet (storage/cursors.py).
    context = RunContext(
        server_binary=server_binary,
        peers=peers or {},
        landed=cursors.reader(lake, run_id),
    )
    logger = run_logger()
    # Hold the locks of the environment's servers for the whole environment: a collection or
    # another run (any Prefect home or server) waits instead of measuring a server
    # mid-experiment. A cluster's nodes and a primary's replicas are measured as its members.
    return measure_units(
        env,
        profile,
        run_id,
        lake,
        host_group,
        context,
        lambda unit: families_for(unit, families),
        f"yardstick run {run_id}",
        logger.warning,
        cleanup=True,
    )


def measure_environments(
    envs: list[Environment],
    profile: Profile,
    run_id: str,
    lake: Lake,
    server_binary: dict[str, str] | None = None,
    families: list[str] | None = None,
) -> list[EnvOutcome]:
    """Measure every environment: one host group after another inside, groups side by side
    (task runs in a flow run, threads of this process otherwise)."""
    if not engine.orchestrated():
        return _measure_plainly(envs, profile, run_id, lake, server_binary, families)
    futures: list[PrefectFuture] = []
    groups = host_groups(envs)
    for group in groups:
        # Environments on one host run one after another: a measurement perturbs the next.
        previous: PrefectFuture | None = None
        for env in group:
            named = measure_environment.with_options(
                task_run_name=_label_of(env.name)  # a callable: braces stay literal
            )
            previous = named.submit(
                # quote(): Prefect need not walk the profile looking for futures (a model
                # field named `keys` would make it mistake the model for a dict).
                env,
                quote(profile),
                run_id,
                lake,
                host_group_label(group),
                server_binary,
                families=families,
                peers={e.name: e for e in envs},
                wait_for=[previous] if previous else None,
            )
            futures.append(previous)
    try:
        return [part for future in futures for part in future.result().with_members()]
    except BaseException as exc:
        # Ctrl-C or SIGTERM reached this thread as an exception (Prefect's own handler): the
        # families in the worker threads stop at their next check and restore the servers
        # before the run ends, rather than after it.
        signum = getattr(exc, "signal", None)  # Prefect's TerminationSignal carries it
        reason = signal.Signals(signum).name if signum else type(exc).__name__
        interrupt.request_stop(f"{reason} received", signum)
        for future in futures:
            future.wait(timeout=STOP_GRACE_S)
        raise


def _measure_plainly(
    envs: list[Environment],
    profile: Profile,
    run_id: str,
    lake: Lake,
    server_binary: dict[str, str] | None,
    families: list[str] | None,
) -> list[EnvOutcome]:
    """measure_environments without a flow run: a thread per host group (as many as the
    flow's task runner has workers), its environments one after another."""
    peers = {e.name: e for e in envs}
    holders = {
        e.name: engine.journal.add(task_run_label("measure-environment", e.name), "PENDING")
        for e in envs
    }

    def one_group(group: list[Environment]) -> list[EnvOutcome]:
        """The group's environments in order (a measurement perturbs the next)."""
        label, outcomes = host_group_label(group), []
        for env in group:
            holder = holders[env.name]
            with engine.journal.running(holder.name, holder):
                outcomes.append(
                    measure_environment.fn(
                        env,
                        profile,
                        run_id,
                        lake,
                        label,
                        server_binary,
                        families=families,
                        peers=peers,
                    )
                )
        return outcomes

    outcomes = each_host_group(envs, one_group, "yardstick-measure")
    return [part for outcome in outcomes for part in outcome.with_members()]


def _label_of(env_name: str):
    """The measure-environment task run's name for one environment, as Prefect calls it."""
    label = task_run_label("measure-environment", env_name)
    return lambda: label
