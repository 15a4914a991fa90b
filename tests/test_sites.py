"""Many sites: one nightly run fans out to a worker per site (separate processes, each in its
own working directory), every site lands into one lake on an S3 API server, and the run
builds and reports once; a site without a worker is reported missing within its timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from yardstick.flows.collect import COLLECT_SITE_DEPLOYMENT
from yardstick.flows.sites import SITE_DEPLOYMENT

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
PREFECT = Path(sys.executable).parent / "prefect"
WORKDIR_STEP = "prefect.deployments.steps.set_working_directory"


def _deploy(client, name: str, entrypoint: str) -> None:
    """Register one of prefect.yaml's site deployments, running the code in this repository."""
    flow_name, deployment = name.split("/")
    flow_id = client.create_flow_from_name(flow_name)
    client.create_deployment(
        flow_id=flow_id,
        name=deployment,
        entrypoint=entrypoint,
        work_pool_name="yardstick",
        pull_steps=[{WORKDIR_STEP: {"directory": str(REPO)}}],
    )


def _start_worker(site: str, home: Path, api_url: str) -> subprocess.Popen:
    """`prefect worker start` for one site's work queue, in its own folder and Prefect home."""
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_API_URL=api_url,
        PREFECT_HOME=str(home / "prefect"),
        PREFECT_WORKER_QUERY_SECONDS="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_LOGGING_LEVEL="WARNING",
    )
    return subprocess.Popen(
        [
            str(PREFECT),
            "worker",
            "start",
            "--pool",
            "yardstick",
            "--work-queue",
            site,
            "--type",
            "process",
            "--name",
            f"worker-{site}",
        ],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(home / "worker.log").open("w"),
        start_new_session=True,
    )


def _wait_for_workers(client, names: set[str], timeout_s: float = 60) -> None:
    """Until both workers have polled the pool (they then take runs within a second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {w.name for w in client.read_workers_for_work_pool("yardstick")}
        if names <= seen:
            return
        assert time.monotonic() < deadline, f"workers not up: {names - seen}"
        time.sleep(0.5)


def _collections(lake_url: str) -> dict[str, int]:
    """Collection runs landed per environment."""
    from yardstick.storage import lake, lakefs

    counts: dict[str, int] = {}
    for f in lake.current_files(lake_url, ["runs"]):
        rows = lakefs.read_table(f.path).to_pylist()
        counts[f.env] = counts.get(f.env, 0) + sum(r["profile"] == "collect" for r in rows)
    return counts


def _collect_twice(client, config: str, lake_url: str) -> None:
    """Two collections: each lands east's and west's through their workers; south's first
    (no worker) is cancelled as superseded when the second is sent."""
    from prefect.client.schemas.filters import WorkQueueFilter, WorkQueueFilterName

    from yardstick.flows.collect import collect

    for round_ in (1, 2):
        collect(config_path=config, lake_dir=lake_url, compact_after_files=0)
        deadline = time.monotonic() + 60
        while True:
            counts = _collections(lake_url)
            if counts.get("cache-east") == counts.get("cache-west") == round_:
                break
            assert time.monotonic() < deadline, counts
            time.sleep(0.5)
    assert _collections(lake_url).get("cache-south", 0) == 0
    south = client.read_flow_runs(
        work_queue_filter=WorkQueueFilter(name=WorkQueueFilterName(any_=["south"]))
    )
    # The queue also holds the nightly's measure-site run (cancelled: no worker).
    states = sorted(
        (r.state.type.value, r.state.message or "") for r in south if "run_id" not in r.parameters
    )
    assert [s for s, _ in states] == ["CANCELLED", "SCHEDULED"], states
    assert "superseded" in states[0][1]


@pytest.mark.server_agnostic  # the kind of Redis server changes nothing about the fan-out
def test_one_nightly_run_fans_out_to_a_worker_per_site(
    tmp_path, prefect_server, s3_lake, start_redis
):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL

    from yardstick.flows.nightly import nightly

    servers = {site: start_redis() for site in ("east", "west", "south")}
    config = tmp_path / "environments.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "environments": [
                    {
                        "name": f"cache-{site}",
                        "url": server.url,
                        "mode": "scratch",
                        "site": site,
                        "families": ["fingerprint", "round_trip"],
                    }
                    for site, server in servers.items()
                ]
            }
        )
    )
    api_url = PREFECT_API_URL.value()
    lake_url = s3_lake()
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="yardstick", type="process"), overwrite=True)
        _deploy(client, SITE_DEPLOYMENT, "flows/sites.py:measure_site")
        _deploy(client, COLLECT_SITE_DEPLOYMENT, "flows/collect.py:collect")
        # No worker for `south`: its machine is down tonight.
        workers = [
            _start_worker(site, tmp_path / f"site-{site}", api_url) for site in ("east", "west")
        ]
        try:
            _wait_for_workers(client, {"worker-east", "worker-west"})
            state = nightly(
                config_path=str(config),
                profile="quick",
                lake_dir=lake_url,
                warehouse_path=str(tmp_path / "hub" / "w.duckdb"),
                out_dir=str(tmp_path / "hub" / "reports"),
                start_timeout_s=30,
                return_state=True,
            )
            # The collection fans out the same way, without waiting: a run per remote site.
            # The down site's unstarted collection is superseded by the next, not piled up.
            _collect_twice(client, str(config), lake_url)
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(timeout=30)
        summary = state.result(raise_on_failure=False)
        # The missing site fails the run, after reporting everything else.
        assert state.is_failed(), state
        runs = {r.name: r for r in client.read_flow_runs()}
    con = duckdb.connect(str(tmp_path / "hub" / "w.duckdb"), read_only=True)
    rows = {
        r[0]: r[1:]
        for r in con.execute(
            "select env, site, status, prober_pid, worker_pid, flow_run_id, error from stg_runs"
        ).fetchall()
    }
    assert set(rows) == {"cache-east", "cache-west", "cache-south"}
    for site in ("east", "west"):
        _site, status, pid, worker_pid, flow_run_id, _error = rows[f"cache-{site}"]
        assert (_site, status) == (site, "ok")
        # Measured by that site's own flow run, a child of that site's worker process.
        assert str(runs[f"{site}-{summary.run_id}"].id) == flow_run_id
        assert worker_pid == workers[("east", "west").index(site)].pid and pid != os.getpid()
    assert rows["cache-south"][1] == "failed" and "no worker" in rows["cache-south"][5]
    assert (
        con.execute(
            "select count(*) from figures where env in ('cache-east', 'cache-west')"
        ).fetchone()[0]
        > 0
    )
    index = (tmp_path / "hub" / "reports" / "index.md").read_text()
    assert "| south | cache-south | **missing**: no worker of work queue 'south'" in index
    assert "| east | cache-east | completed" in index
    # Nothing of the lake on the hub's or the workers' disks: it is all on the S3 server.
    assert not any(p.suffix == ".parquet" for p in tmp_path.rglob("*"))
