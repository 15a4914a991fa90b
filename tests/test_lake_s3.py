"""The lake on S3 (moto's real S3 API server on loopback, tests/conftest.py `s3_lake`): the same
runs give the same warehouse as on a local lake, through compaction and retention; a landing
killed mid-upload leaves nothing a reader picks up; no credential is written anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import open_warehouse

from yardstick.settings.config import Environment
from yardstick.settings.profiles import RoundTripProfile
from yardstick.storage import compaction, delta, lakefs, retention, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.preflight import NotWritable, check_writable
from yardstick.storage.schemas import to_table
from yardstick.tasks.fingerprint import fingerprint
from yardstick.tasks.round_trip import round_trip

# A Redis server only produces the runs; what is tested is where they are kept.
pytestmark = pytest.mark.server_agnostic

ENV = "s3-test"
# Marts compared between the two warehouses (floats within REL_TOL).
COMPARED = ("figures", "measures", "run_environment", "figure_trends")
REL_TOL = 1e-9


def _measure(env: Environment, when: datetime) -> tuple[str, dict[str, pa.Table]]:
    """One real run's tables (fingerprint and a short round trip), as a flow hands them over."""
    run_id = delta.new_run_id(when)
    measured = [
        fingerprint(env, None),
        round_trip(env, RoundTripProfile(windows=2, window_s=0.1, interval_ms=0.5)),
    ]
    tables: dict[str, pa.Table] = {}
    for result in measured:
        tables.update(result.tables)
    steps = [
        {
            "family": family,
            "status": "ok",
            "started_at": when,
            "finished_at": when,
            "duration_s": 0.2,
            "window_s": result.window_s,
        }
        for family, result in zip(("fingerprint", "round_trip"), measured, strict=True)
    ]
    tables["steps"] = to_table("steps", steps)
    run = {
        "profile": "test",
        "started_at": when,
        "finished_at": when,
        "duration_s": 0.3,
        "status": "ok",
        "mode": env.mode,
        "transport": "direct",
        "url": env.url_redacted,
        "host_group": "localhost",
        "prober_on_host": True,
        "tool_version": "test",
    }
    tables["runs"] = to_table("runs", [run])
    return run_id, tables


@pytest.fixture(scope="module")
def measured_runs() -> list[tuple[str, dict[str, pa.Table]]]:
    """Three real runs of one environment, an hour apart, kept in memory."""
    from yardstick.host.embedded import RedisProcess

    start = datetime.now(UTC) - timedelta(hours=4)
    with RedisProcess() as server:
        env = Environment(name=ENV, url=server.url, mode="scratch")
        return [_measure(env, start + timedelta(hours=i)) for i in range(3)]


def _land(lake_dir: str | Path, run: tuple[str, dict[str, pa.Table]]) -> None:
    run_id, tables = run
    for table, data in tables.items():
        if table != "runs":
            delta.write(Lake.at(lake_dir), table, ENV, run_id, data)
    delta.write(Lake.at(lake_dir), "runs", ENV, run_id, tables["runs"])  # last, as the flows do


def _marts(path: Path) -> dict[str, list[tuple]]:
    con = open_warehouse(path)
    try:
        return {
            name: sorted(con.execute(f"select * from {name}").fetchall(), key=repr)
            for name in COMPARED
        }
    finally:
        con.close()


def _same(a: dict[str, list[tuple]], b: dict[str, list[tuple]]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert len(a[name]) == len(b[name]), name
        assert a[name], f"{name} is empty: nothing compared"
        for row_a, row_b in zip(a[name], b[name], strict=True):
            for x, y in zip(row_a, row_b, strict=True):
                if isinstance(x, float) and isinstance(y, float):
                    assert x == pytest.approx(y, rel=REL_TOL, nan_ok=True), name
                else:
                    assert x == y, name


def _layout(lake_dir: str | Path) -> list[tuple[str, str, str, int]]:
    """The lake's data files by table, partition and rows (not by name or where it lives)."""
    return sorted(
        (f.table, f.env, f.period, f.rows)
        for t in delta.tables_present(Lake.at(lake_dir))
        for f in delta.data_files(Lake.at(lake_dir), t)
    )


def _orphan(url: str, run_id: str) -> str:
    """What a landing killed between uploading its data file and committing leaves: a data
    file in the partition folder that no version of the table names. Its key."""
    import pyarrow.parquet as pq

    rows = to_table("runs", [{"profile": "killed", "status": "ok"}])
    data = delta.prepare("runs", ENV, run_id, rows).drop_columns(["env", "period"])
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink)
    key = f"{url}/runs/env={ENV}/period={delta.run_period(run_id)}/part-00000-killed-c000.parquet"
    lakefs.filesystem().pipe_file(key, sink.getvalue().to_pybytes())
    return key


@pytest.mark.e2e
def test_an_s3_lake_gives_the_warehouse_a_local_lake_gives(measured_runs, s3_lake, tmp_path):
    url, local = s3_lake("same"), tmp_path / "lake"
    first, second, third = measured_runs
    for run in (first, second):
        _land(local, run)
        _land(url, run)
    # A landing killed after its upload, before its commit: its run would enter the figures
    # had any of it become visible.
    killed = delta.new_run_id(datetime.now(UTC) - timedelta(hours=3, minutes=30))
    orphan = _orphan(url, killed)
    assert killed not in {run for _, run in delta.complete_runs(Lake.at(url))}
    assert _layout(url) == _layout(local)

    # One file name for every warehouse (its stem is dbt's database name): dbt's parse of the
    # project is reused across them and the other tests.
    s3_wh, local_wh, rebuilt = (tmp_path / kind / "w.duckdb" for kind in ("s3", "local", "re"))
    warehouse.build(Lake.at(url), s3_wh)
    warehouse.build(Lake.at(local), local_wh)
    _same(_marts(s3_wh), _marts(local_wh))
    con = open_warehouse(s3_wh)
    try:
        loaded = {r for (r,) in con.execute(f"select run_id from {warehouse.LOADED}").fetchall()}
        remembered = [p for (p,) in con.execute(f"select path from {warehouse.FILES}").fetchall()]
    finally:
        con.close()
    assert loaded == {first[0], second[0]}
    assert remembered and all(p.startswith(url + "/") for p in remembered)

    # A third run, compaction (whose vacuum deletes the killed landing's file), retention of
    # every detail row the warehouse has (today: 40 days on), then the nightly update: the
    # same on both lakes, and on S3 what a rebuild from the S3 lake alone gives.
    _land(local, third)
    _land(url, third)
    s3_report = compaction.compact(Lake.at(url), vacuum_hours=0)
    local_report = compaction.compact(Lake.at(local), vacuum_hours=0)
    assert s3_report.files_in == local_report.files_in > 0
    assert not lakefs.exists(str(orphan)) and s3_report.files_vacuumed
    later = (datetime.now(UTC) + timedelta(days=40)).date()
    s3_kept = retention.apply(Lake.at(url), s3_wh, detail_days=30, today=later)
    local_kept = retention.apply(Lake.at(local), local_wh, detail_days=30, today=later)
    assert s3_kept.files_dropped == local_kept.files_dropped > 0
    assert s3_kept.rows_retained == local_kept.rows_retained > 0
    assert _layout(url) == _layout(local)
    assert warehouse.update(Lake.at(url), s3_wh).mode == "incremental"
    warehouse.build(Lake.at(url), rebuilt)
    _same(_marts(rebuilt), _marts(s3_wh))

    # No credential in any object of the lake (logs included) nor in the warehouses.
    secrets = [os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_ACCESS_KEY_ID"]]
    fs = lakefs.filesystem()
    keys = fs.find(str(Lake.at(url)))
    assert len(keys) > 5 and any("/_delta_log/" in k for k in keys)
    for key in keys:
        blob = fs.cat_file(key)
        assert not any(s.encode() in blob for s in secrets), key
    for path in tmp_path.glob("*/*.duckdb"):
        blob = path.read_bytes()
        assert not any(s.encode() in blob for s in secrets), path


def test_an_s3_landing_never_lands_a_run_twice(s3_lake):
    url = s3_lake("twice")
    run_id = delta.new_run_id()
    first = to_table("runs", [{"profile": "first", "status": "ok"}])
    second = to_table("runs", [{"profile": "second", "status": "ok"}])
    delta.write(Lake.at(url), "runs", ENV, run_id, first)
    assert Lake.at(url).path("runs") == url + "/runs"
    with pytest.raises(delta.LakeConflict):
        delta.write(Lake.at(url), "runs", ENV, run_id, second)
    assert delta.read(Lake.at(url), "runs")["profile"].to_pylist() == ["first"]


def test_two_processes_appending_to_one_s3_table_both_land(s3_lake):
    from test_lake_warehouse import _appenders

    url = s3_lake("appenders")
    procs = _appenders(url, ["a", "b"], 6)
    assert [p.wait(180) for p in procs] == [0, 0]
    data = delta.read(Lake.at(url), "steps")
    counts = {env: data["env"].to_pylist().count(env) for env in ("a", "b")}
    assert counts == {"a": 6 * 3, "b": 6 * 3}
    assert len(set(data["run_id"].to_pylist())) == 12
    # Each commit is its own version: none was overwritten by the other writer's.
    assert Lake.at(url).table("steps").version() == 11


def test_a_bad_s3_lake_is_one_line_naming_it_without_secrets(s3_lake, monkeypatch):
    secrets = [os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_ACCESS_KEY_ID"]]
    check_writable({"lake": s3_lake("fine")})  # a reachable, writable lake passes
    with pytest.raises(NotWritable) as missing:
        check_writable({"lake": "s3://no-such-bucket/lake"})
    assert str(missing.value) == (
        "lake s3://no-such-bucket/lake: cannot be written (the bucket does not exist)"
    )
    # Nothing listens on the endpoint: the line names the lake, not the endpoint.
    with socket_closed() as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        with pytest.raises(NotWritable) as unreachable:
            check_writable({"lake": f"s3://{s3_lake.bucket}/lake"})
        # delta-rs's own object store: the same kind of line.
        with pytest.raises(lakefs.StorageError) as landing:
            delta.write(
                Lake.at(f"s3://{s3_lake.bucket}/lake"), "runs", ENV, delta.new_run_id(), _runs_row()
            )
    assert "the storage endpoint cannot be reached" in str(landing.value)
    assert endpoint not in str(landing.value) and "127.0.0.1" not in str(landing.value)
    line = str(unreachable.value)
    assert line == (
        f"lake s3://{s3_lake.bucket}/lake: cannot be written "
        "(the storage endpoint cannot be reached)"
    )
    with pytest.raises(NotWritable) as in_url:
        check_writable({"lake": f"s3://key:{secrets[0]}@bucket/lake"})
    for text in (str(missing.value), line, str(in_url.value)):
        assert "\n" not in text
        assert not any(s in text for s in [*secrets, endpoint, s3_lake.endpoint]), text


def _runs_row() -> pa.Table:
    return to_table("runs", [{"profile": "x", "status": "ok"}])


class socket_closed:
    """An http endpoint on a loopback port nothing listens on."""

    def __enter__(self) -> str:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return f"http://127.0.0.1:{probe.getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        return None


def test_s3_lake_urls_and_paths():
    root = Lake.at("s3://bucket/some/prefix/")
    assert root.remote and str(root) == "s3://bucket/some/prefix"
    # What pathlib makes of the URL (Path("s3://b/p") is "s3:/b/p") names the same lake.
    assert Lake.at(Path("s3://bucket/some/prefix")) == root
    assert Lake.at(root) is root  # made once: a Lake passed down is never re-made
    local = Lake.at("lake")
    assert not local.remote and local.folder == Path("lake").resolve()
    assert not lakefs.is_remote("./lake") and lakefs.is_remote(root.path("runs"))
    assert root.path("runs", "env=a") == "s3://bucket/some/prefix/runs/env=a"
    assert root.storage_options["conditional_put"] == "etag"
    assert local.storage_options is None
    with pytest.raises(ValueError, match="credentials in an s3:// URL are refused") as refused:
        Lake.at("s3://AKIAEXAMPLE:very-secret@bucket/lake")
    assert "very-secret" not in str(refused.value)
    # Any case of s3://; any other scheme is refused, never taken for a local folder.
    assert Lake.at("S3://bucket/some/prefix") == root
    for url in ("ftp://bucket/lake", "gs://bucket/lake", "file:///tmp/lake"):
        with pytest.raises(ValueError, match=r"scheme is not supported: give a local folder"):
            Lake.at(url)
    with pytest.raises(ValueError, match="has no local folder"):
        _ = root.folder


def test_one_machine_compacts_an_s3_lake_at_a_time(s3_lake):
    url = s3_lake("lock")
    with compaction.lake_lock(Lake.at(url)) as held:
        assert held
        assert compaction.compact(Lake.at(url)).skipped == compaction.LAKE_BUSY
    assert compaction.compact(Lake.at(url)).skipped is None


def test_storage_errors_name_the_lake_path_not_the_endpoint():
    from botocore.exceptions import EndpointConnectionError

    path = Lake.at("s3://bucket/lake").path("runs")
    with pytest.raises(lakefs.StorageError) as failed, lakefs.storage_errors("upload", path):
        raise EndpointConnectionError(endpoint_url="http://10.1.2.3:9000/bucket/lake/runs")
    assert str(failed.value) == (
        "s3://bucket/lake/runs: upload failed (the storage endpoint cannot be reached)"
    )


COMPACTOR = """
import sys
from yardstick.storage import compaction
from yardstick.storage.lakefs import Lake
print(compaction.compact(Lake.at(sys.argv[1])).summary(), flush=True)
"""


def test_two_machines_compacting_one_s3_lake_never_double_a_row(s3_lake, tmp_path):
    url = s3_lake("two-machines")
    start = datetime(2026, 10, 28, 2, 0, tzinfo=UTC)
    landed = []
    for i in range(6):
        run_id = delta.new_run_id(start + timedelta(minutes=5 * i))
        steps = [{"family": "counters", "status": "ok", "started_at": start}]
        delta.write(Lake.at(url), "steps", ENV, run_id, to_table("steps", steps))
        delta.write(
            Lake.at(url), "runs", ENV, run_id, to_table("runs", [{"profile": "c", "status": "ok"}])
        )
        landed.append(run_id)
    # Two machines: each its own lock folder, so the lake lock keeps neither from compacting.
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", COMPACTOR, url],
            env={**os.environ, "YARDSTICK_LOCK_DIR": str(tmp_path / f"machine-{n}")},
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    for table in ("runs", "steps"):
        files = delta.data_files(Lake.at(url), table)
        assert len(files) == 1, (table, outputs)
        assert sorted(delta.read(Lake.at(url), table)["run_id"].to_pylist()) == landed
