"""One configured environment as the servers it is made of, measured as one: a standalone
server and its replicas, a Redis Cluster and each of its nodes, the master a Sentinel names and
its replicas. Each server lands under its own name (`<env>.<host>_<port>`, a member of `<env>`)
so every figure, trend and verdict works per node; the environment's own row lands last,
with a `members` step that names the nodes not fully measured (its status is partial then)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from yardstick import interrupt
from yardstick.access.topology import Shape, discover, units_of
from yardstick.flows.hostlock import HostBusy, host_slots
from yardstick.flows.landing import (
    cleanup_step,
    instant_step,
    one_line,
    record_run,
    run_family,
    run_logger,
    unreachable_step,
)
from yardstick.flows.outcome import EnvOutcome
from yardstick.flows.plan import PHASES
from yardstick.settings.config import Environment
from yardstick.settings.profiles import Profile
from yardstick.storage.lakefs import Lake
from yardstick.tasks.base import Family, RunContext, unit_kind, utc_now


def members_step(outcomes: list[EnvOutcome], started_at) -> dict:
    """The environment's step that says how its nodes' measurement ended."""
    bad = [o for o in outcomes if o.status != "ok"]
    reason = "; ".join(f"{o.env} {o.status}" + (f" ({o.error})" if o.error else "") for o in bad)
    now = utc_now()
    return {
        "family": "members",
        "started_at": started_at,
        "finished_at": now,
        "duration_s": (now - started_at).total_seconds(),
        "window_s": 0.0,
        # A member that measured part of its families makes this step partial, not failed.
        "status": "ok"
        if not bad
        else ("partial" if all(o.status == "partial" for o in bad) else "failed"),
        "reason": reason or f"{len(outcomes)} other servers measured",
    }


def measure_units(
    env: Environment,
    profile: Profile,
    run_id: str,
    lake: Lake,
    host_group: str,
    context: RunContext,
    families_of: Callable[[Environment], list[Family]],
    what: str,
    on_wait: Callable[[str], None],
    wait_s: float | None = None,
    cleanup: bool = False,
    plain: bool = False,
) -> EnvOutcome:
    """Find what `env` is made of, lock its servers, run each server's families phase by
    phase across the servers (the whole cluster is read before any load), land each server's
    run row, then the environment's; its outcome carries its members'."""
    started_at, start = utc_now(), time.perf_counter()
    shape: Shape | None
    try:
        shape = discover(env)
        units, problem = units_of(shape), None
    except Exception as exc:  # nothing answered: recorded as the environment's connect step
        shape, units, problem = None, [env], one_line(exc)
    context = replace(context, shape=shape)
    steps: dict[str, list[dict]] = {unit.name: [] for unit in units}
    plans = {unit.name: families_of(unit) for unit in units}
    try:
        with host_slots(units, what, on_wait, wait_s) as slots:
            unreachable = {u.name: problem or slots[u.name].unreachable for u in units}
            for unit in units:
                if unreachable[unit.name]:
                    steps[unit.name].append(unreachable_step(unit, unreachable[unit.name]))
            if cleanup:
                for unit in units:
                    if (
                        unit.mode == "scratch"
                        and unit_kind(unit) in ("server", "primary")
                        and not unreachable[unit.name]
                        and not interrupt.STOP.is_set()
                    ):
                        steps[unit.name].append(cleanup_step(unit, profile))
            for phase in PHASES:
                for unit in units:
                    for family in plans[unit.name]:
                        if family.phase != phase:
                            continue
                        step = run_family(
                            family,
                            unit,
                            profile,
                            context,
                            run_id,
                            lake,
                            unreachable[unit.name],
                            plain=plain,
                        )
                        steps[unit.name].append(step)
                        if step.get("unreachable"):
                            unreachable[unit.name] = step.pop("unreachable")
    except (HostBusy, TimeoutError) as exc:
        for unit in units:
            steps[unit.name] = [
                instant_step(f.name, "skipped", f"host busy: {exc}") for f in plans[unit.name]
            ]
    if shape is not None and shape.problems:
        run_logger().warning("%s: %s", env.name, "; ".join(shape.problems))
    members = [
        record_run(unit, profile, run_id, lake, host_group, started_at, start, steps[unit.name])
        for unit in units[1:]
    ]
    whole = steps[units[0].name]
    if members:
        whole.append(members_step(members, started_at))
    outcome = record_run(units[0], profile, run_id, lake, host_group, started_at, start, whole)
    return outcome.model_copy(update={"members": members})
