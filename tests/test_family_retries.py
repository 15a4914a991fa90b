"""A family's declared retries: a failure is tried again as often as it declares, the same way
in a plain call (the one-shot CLI, the 5-minute collection) and in a Prefect task run; a skip,
a stop or the family's bound never is (a retry would start its units again and lose those it
finished)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from prefect import flow

from yardstick import interrupt
from yardstick.flows.landing import family_task, run_family
from yardstick.settings.config import Environment
from yardstick.settings.profiles import PROFILES
from yardstick.storage.lakefs import Lake
from yardstick.tasks import base
from yardstick.tasks.base import Family, Measured, RunContext, Skipped
from yardstick.tasks.throughput import TABLES

# Only the task-run cases need the API; the plain ones never ask it.
pytestmark = pytest.mark.usefixtures("prefect_server")

ENV = Environment(
    name="h", url="redis://127.0.0.1:1/0", mode="scratch", family_timeouts_s={"bounded": 1}
)
# The three ways a family runs: the collection's plain call, a one-shot run's plain step, a
# task run inside a flow run.
WAYS = ("plain", "step", "task run")


def _family(name: str, measure: Callable[[list[str]], Measured], retries: int) -> Family:
    """A family of `measure`, retried `retries` times 0.1 s apart."""
    return Family(
        name=name,
        phase="load",
        measure=measure,
        arguments=lambda env, profile, ctx: (),
        tables={"benchmark": TABLES["benchmark"]},
        retries=retries,
        retry_delay_s=0.1,
    )


def _run(way: str, family: Family, tmp_path: Path) -> dict:
    """The family's step row, run `way`."""
    if way == "task run":

        @flow(name="family-retries-test")
        def in_a_flow_run() -> dict:
            """run_family inside a flow run: the family is a task run."""
            return run_family(
                family, ENV, PROFILES["quick"], RunContext(), "r1", Lake.at(str(tmp_path)), None
            )

        return in_a_flow_run()
    plain = way == "plain"
    return run_family(
        family,
        ENV,
        PROFILES["quick"],
        RunContext(),
        "r1",
        Lake.at(str(tmp_path)),
        None,
        plain=plain,
    )


@pytest.mark.parametrize("way", WAYS)
def test_a_failure_is_tried_again_as_declared(way, tmp_path):
    calls: list[str] = []

    def fails_once() -> Measured:
        calls.append("flaky")
        if len(calls) == 1:
            raise ConnectionError("the first answer lost")
        return Measured()

    def always_fails() -> Measured:
        calls.append("broken")
        raise ConnectionError("never answers")

    step = _run(way, _family("flaky", fails_once, retries=1), tmp_path)
    assert step["status"] == "ok", step
    assert calls == ["flaky", "flaky"]
    calls.clear()
    step = _run(way, _family("broken", always_fails, retries=2), tmp_path)
    assert step["status"] == "failed" and "never answers" in step["reason"], step
    assert calls == ["broken"] * 3


@pytest.mark.parametrize("way", WAYS)
def test_a_skip_or_a_bound_is_not_tried_again(way, tmp_path):
    calls: list[str] = []

    def skips() -> Measured:
        calls.append("skips")
        raise Skipped("does not apply here")

    def one_then_hang() -> Measured:
        calls.append("bounded")
        progress = base.progress()
        progress.plan(3, "things")
        progress.finished(lambda: Measured(window_s=0.5))
        interrupt.sleep(600)  # the 1 s bound ends it here
        return Measured()

    step = _run(way, _family("skips", skips, retries=2), tmp_path)
    assert step["status"] == "skipped" and step["reason"] == "does not apply here", step
    step = _run(way, _family("bounded", one_then_hang, retries=2), tmp_path)
    # Tried again, it would plan its units anew: the one it finished would be lost.
    assert step["reason"] == "timed out: bounded stopped at its 1 s bound; landed 1 of 3 things"
    assert calls == ["skips", "bounded"]


def test_a_familys_task_is_made_once_with_its_declaration():
    family = _family("flaky", lambda: Measured(), retries=2)
    made = family_task(family)
    assert made is family_task(family)
    assert (made.name, made.retries, made.retry_delay_seconds) == ("flaky", 2, 0.1)
