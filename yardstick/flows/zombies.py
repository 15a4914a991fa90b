"""A lost flow run marked Crashed: the Prefect automation that watches flow-run heartbeats.

A machine that dies, or a worker killed with -9 together with its flow process, leaves the
run "Running" for ever: nothing is left to report its end. Prefect 3.6.22+ emits a heartbeat
event per running flow run every PREFECT_FLOWS_HEARTBEAT_FREQUENCY seconds (180 by default);
this automation marks a run Crashed once no event of it arrived for three heartbeats. Its
files then carry no `runs` row, and the warehouse leaves them out of the figures.

    python -m yardstick.flows.zombies      # once, against the server in PREFECT_API_URL
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from prefect.automations import Automation
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification
from prefect.settings import get_current_settings

NAME = "yardstick: crash flow runs that stopped sending heartbeats"
MISSED_HEARTBEATS = 3


def crash_zombie_flows() -> UUID:
    """Create the automation unless one of that name exists; return its id."""
    try:
        return Automation.read(name=NAME).id
    except ValueError:
        pass  # none yet
    heartbeat_s = get_current_settings().flows.heartbeat_frequency or 180
    automation = Automation(
        name=NAME,
        description="Marks a flow run Crashed when it sent no event for "
        f"{MISSED_HEARTBEATS} heartbeats (redis-yardstick, yardstick/flows/zombies.py).",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            # Any event of the run (a heartbeat, or its final state) shows it alive.
            expect={"prefect.flow-run.*"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=MISSED_HEARTBEATS * heartbeat_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {MISSED_HEARTBEATS * heartbeat_s} s: the process "
                "running it is gone (machine, worker or flow process killed)",
            )
        ],
    )
    return automation.create().id


if __name__ == "__main__":
    print(f"automation {NAME!r}: {crash_zombie_flows()}")
