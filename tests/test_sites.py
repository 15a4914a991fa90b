"""Many sites: one nightly run fans out to a worker per site (separate processes, each in its
own working directory), every site lands into one lake on an S3 API server, and the run
builds and reports once; a site without a worker is reported missing within its timeout.
The deployments are registered with prefect.yaml's pools, and the workers started with the
README's commands: the hub's worker never runs a site's part."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import open_warehouse

from yardstick.flows.collect import COLLECT_SITE_DEPLOYMENT
from yardstick.flows.sites import SITE_DEPLOYMENT, SITE_POOL
from yardstick.storage.lakefs import Lake

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
PREFECT = Path(sys.executable).parent / "prefect"
WORKDIR_STEP = "prefect.deployments.steps.set_working_directory"
NIGHTLY_DEPLOYMENT = "yardstick-nightly/nightly"
# Generous: on 2 loaded cores a worker's flow-run process takes 5-20 s to start.
START_TIMEOUT_S = 60
WAIT_S = 180


def _deploy(client, name: str) -> None:
    """Register one of prefect.yaml's deployments as it declares it (entrypoint, work pool,
    job variables), without its schedule, running the code in this repository."""
    flow_name, deployment = name.split("/")
    declared = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    (spec,) = [d for d in declared if d["name"] == deployment]
    flow_id = client.create_flow_from_name(flow_name)
    client.create_deployment(
        flow_id=flow_id,
        name=deployment,
        entrypoint=spec["entrypoint"],
        work_pool_name=spec["work_pool"]["name"],
        job_variables=spec["work_pool"].get("job_variables") or {},
        pull_steps=[{WORKDIR_STEP: {"directory": str(REPO)}}],
    )


def _create_pools(client) -> None:
    """The README's `prefect work-pool create` for the hub's pool and the sites' pool."""
    from prefect.client.schemas.actions import WorkPoolCreate

    for pool in ("yardstick", SITE_POOL):
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"), overwrite=True)


def _start_site_worker(site: str, home: Path, api_url: str) -> subprocess.Popen:
    """The README's command for one site's worker, named after the site."""
    args = ["--pool", SITE_POOL, "--work-queue", site, "--name", f"worker-{site}"]
    return _start_worker(args, home, api_url)


def _start_worker(args: list[str], home: Path, api_url: str) -> subprocess.Popen:
    """`prefect worker start <args>` in its own folder and Prefect home."""
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
        [str(PREFECT), "worker", "start", *args],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(home / "worker.log").open("w"),
        start_new_session=True,
    )


def _wait_for_workers(
    client, names: set[str], pool: str = SITE_POOL, timeout_s: float = WAIT_S
) -> None:
    """Until the named workers have polled the pool (they then take runs within a second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {w.name for w in client.read_workers_for_work_pool(pool)}
        if names <= seen:
            return
        assert time.monotonic() < deadline, f"workers not up: {names - seen}"
        time.sleep(0.5)


def _collections(lake_url: str) -> dict[str, int]:
    """Collection runs landed per environment."""
    from yardstick.storage import delta, lakefs

    counts: dict[str, int] = {}
    for f in delta.current_files(Lake.at(lake_url), ["runs"]):
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
        deadline = time.monotonic() + WAIT_S
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


def _stop(workers: list[subprocess.Popen]) -> None:
    """Stop the workers this test started (each by its own pid)."""
    for worker in workers:
        worker.terminate()
    for worker in workers:
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@pytest.mark.server_agnostic
def test_the_hub_worker_runs_no_site_part_and_a_site_without_worker_is_missing(
    tmp_path, prefect_server, s3_lake, start_redis
):
    """The README's commands: the hub `prefect worker start --pool yardstick` (no flag) runs the
    nightly deployment and measures the local site; alpha's and beta's workers measure theirs;
    gamma has no worker: missing in the index, its report and its verdict, with the reason."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL

    sites = ("local", "alpha", "beta", "gamma")
    servers = {site: start_redis() for site in sites}
    config = tmp_path / "environments.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "environments": [
                    {
                        "name": f"cache-{site}",
                        "url": server.url,
                        "mode": "scratch",
                        **({"site": site} if site != "local" else {}),
                        "families": ["fingerprint", "round_trip"],
                    }
                    for site, server in servers.items()
                ]
            }
        )
    )
    api_url = PREFECT_API_URL.value()
    lake_url = s3_lake()
    hub_dir = tmp_path / "hub"
    with get_client(sync_client=True) as client:
        _create_pools(client)
        for name in (NIGHTLY_DEPLOYMENT, SITE_DEPLOYMENT, COLLECT_SITE_DEPLOYMENT):
            _deploy(client, name)
        hub_before = {w.name for w in client.read_workers_for_work_pool("yardstick")}
        # The README's commands, word for word (the hub's takes no --work-queue).
        hub = _start_worker(["--pool", "yardstick"], hub_dir, api_url)
        site_workers = {
            site: _start_site_worker(site, tmp_path / f"site-{site}", api_url)
            for site in ("alpha", "beta")
        }
        try:
            _wait_for_workers(client, {"worker-alpha", "worker-beta"})
            deadline = time.monotonic() + WAIT_S
            while not {w.name for w in client.read_workers_for_work_pool("yardstick")} - (
                hub_before
            ):
                assert time.monotonic() < deadline, "the hub's worker did not poll its pool"
                time.sleep(0.5)
            # The nightly run as its schedule would start it: a run of its deployment.
            nightly_run = run_deployment(
                NIGHTLY_DEPLOYMENT,
                parameters={
                    "config_path": str(config),
                    "profile": "quick",
                    "lake_dir": lake_url,
                    "warehouse_path": str(hub_dir / "w.duckdb"),
                    "out_dir": str(hub_dir / "reports"),
                    "start_timeout_s": START_TIMEOUT_S,
                },
                timeout=1800,
            )
        finally:
            _stop([hub, *site_workers.values()])
        # gamma is missing: the run reports everything, then ends Failed.
        assert nightly_run.state.is_failed(), (nightly_run.state, (hub_dir / "worker.log"))
    con = open_warehouse(hub_dir / "w.duckdb")
    columns = ("site", "status", "host", "pid", "worker_pid", "flow_run", "error")
    rows = {
        r[0]: dict(zip(columns, r[1:], strict=True))
        for r in con.execute(
            "select env, site, status, prober_hostname, prober_pid, worker_pid, flow_run_id,"
            " error from runs"
        ).fetchall()
    }
    with get_client(sync_client=True) as client:
        # The runs the nightly sent (gamma's row names its run, which nobody started).
        site_runs = {
            site: client.read_flow_run(rows[f"cache-{site}"]["flow_run"]) for site in sites[1:]
        }
    (run_id,) = {r[0] for r in con.execute("select run_id from runs").fetchall()}
    verdicts = dict(con.execute("select env, verdict from verdicts").fetchall())
    reasons = dict(con.execute("select env, missing_reason from verdicts").fetchall())
    assert set(rows) == {f"cache-{site}" for site in sites}
    # Each part run by its own worker: the process that measured is a child of that worker.
    local = rows["cache-local"]
    assert (local["site"], local["worker_pid"]) == ("local", hub.pid)
    assert str(nightly_run.id) == local["flow_run"]
    assert (
        f"Measured from site `local` by {local['host']} (pid {local['pid']}, started by a"
        f" Prefect worker, pid {hub.pid})"
    ) in (hub_dir / "reports" / "cache-local.md").read_text()
    for site, worker in site_workers.items():
        row = rows[f"cache-{site}"]
        assert (row["site"], row["status"], row["worker_pid"]) == (site, "ok", worker.pid)
        run = site_runs[site]
        assert run.parameters["site"] == site and run.state.is_completed()
        assert (run.work_pool_name, run.work_queue_name) == (SITE_POOL, site)
        report = (hub_dir / "reports" / f"cache-{site}.md").read_text()
        assert (
            f"Measured from site `{site}` by {row['host']} (pid {row['pid']}, started by the"
            f" worker of work queue `{site}`, pid {worker.pid})"
        ) in report
    pids = [rows[f"cache-{s}"]["pid"] for s in sites[:3]]
    assert len(set(pids)) == 3 and os.getpid() not in pids
    # gamma: no worker, so nothing ran; the hub wrote why, and no time, machine or pid.
    gamma = rows["cache-gamma"]
    assert gamma["status"] == "missing"
    assert (gamma["host"], gamma["pid"], gamma["worker_pid"]) == (None, None, None)
    why = f"site gamma: no worker of work queue 'gamma' started its run within {START_TIMEOUT_S} s"
    assert gamma["error"].startswith(why), gamma
    assert site_runs["gamma"].state.is_cancelled()
    assert (site_runs["gamma"].work_pool_name, site_runs["gamma"].work_queue_name) == (
        SITE_POOL,
        "gamma",
    )
    assert (verdicts["cache-gamma"], reasons["cache-gamma"]) == ("missing", gamma["error"])
    assert verdicts["cache-alpha"] != "missing" and reasons["cache-alpha"] is None
    index = (hub_dir / "reports" / "index.md").read_text()
    gamma_lines = [line for line in index.splitlines() if "cache-gamma" in line]
    assert gamma_lines and all("missing" in line for line in gamma_lines), gamma_lines
    assert not any("µs" in line or "pid" in line for line in gamma_lines), gamma_lines
    assert f"| cache-gamma | **missing**: {why}" in index  # the verdict table
    assert f"| cache-gamma | scratch | **missing**: {why}" in index  # the environments
    assert "| gamma | cache-gamma | **missing**: no worker of work queue 'gamma'" in index
    assert "| alpha | cache-alpha | completed" in index
    assert f"(worker pid {site_workers['alpha'].pid})" in index
    report = (hub_dir / "reports" / "cache-gamma.md").read_text()
    assert f"**Tonight's verdict: missing**: {why}" in report
    assert f"Status: **missing**: {why}" in report
    status = [line for line in report.splitlines() if line.startswith("Run `")]
    assert status == [
        f"Run `{run_id}`, profile `quick`, scratch environment of site `gamma`. Status:"
        f" **missing**: {gamma['error']}. Nothing was measured."
    ], status
    assert "Measured from" not in report and "µs" not in report
