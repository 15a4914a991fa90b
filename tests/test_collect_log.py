"""A collection says what it did, one INFO line per environment, also where the deployment
keeps Prefect's own INFO lines out (PREFECT_LOGGING_LEVEL=WARNING, as in prefect.yaml and in
this test session)."""

from __future__ import annotations

import logging

import pytest
from conftest import write_config


@pytest.mark.server_agnostic
def test_a_collection_logs_one_info_line_per_environment(
    prefect_server, redis_server, tmp_path, caplog
):
    from yardstick.flows.collect import collect

    assert logging.getLogger("prefect").getEffectiveLevel() == logging.WARNING
    config = write_config(
        tmp_path / "envs.yaml",
        [{"name": name, "url": redis_server.url, "mode": "read-only"} for name in ("a", "b")],
    )
    with caplog.at_level(logging.INFO):
        state = collect(config_path=str(config), lake_dir=str(tmp_path / "lake"), return_state=True)
    assert state.is_completed()
    lines = [r.getMessage() for r in caplog.records if r.name == "prefect.flow_runs"]
    for name in ("a", "b"):
        (line,) = [m for m in lines if m.startswith(f"{name}: ")]
        assert line.startswith(f"{name}: ok in ") and "slowlog_collections" in line
    # Prefect's own INFO lines stay out, as the deployment wants.
    assert not [m for m in lines if "Finished in state" in m]
