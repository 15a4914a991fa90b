"""One measurement per server host at a time, across flows (nightly, collect) and workers:
a Prefect global concurrency limit of 1 slot per host group."""

from __future__ import annotations

import re

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound


def host_limit_name(host_group: str) -> str:
    """The concurrency limit guarding one host group (Prefect names: no slashes, no spaces)."""
    return "yardstick-host-" + (re.sub(r"[^a-z0-9.-]+", "-", host_group.lower()).strip("-") or "x")


def ensure_host_limits(host_groups: list[str]) -> list[str]:
    """Create the 1-slot limit of each host group unless it exists; return their names."""
    names = [host_limit_name(group) for group in host_groups]
    with get_client(sync_client=True) as client:
        for name in names:
            # Read first: every collection (288 a day) would otherwise send a create that
            # fails on the unique name, and the server logs a traceback for each.
            try:
                client.read_global_concurrency_limit_by_name(name)
                continue  # created by an earlier run, or by the operator with another limit
            except ObjectNotFound:
                pass
            try:
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=1)
                )
            except ObjectAlreadyExists:
                pass  # created meanwhile by a run started at the same time
    return names
