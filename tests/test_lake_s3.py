"""The lake on S3 (moto's real S3 API server on loopback, tests/conftest.py `s3_lake`): the same
runs give the same warehouse as on a local lake, through compaction and retention; a landing
killed mid-upload leaves nothing a reader picks up; no credential is written anywhere."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from yardstick.settings.config import Environment
from yardstick.settings.profiles import RoundTripProfile
from yardstick.storage import compaction, lake, lakefs, retention, warehouse
from yardstick.storage.preflight import NotWritable, check_writable
from yardstick.storage.schemas import to_table
from yardstick.tasks.fingerprint import fingerprint
from yardstick.tasks.roundtrip import round_trip

# A Redis server only produces the runs; what is tested is where they are kept.
pytestmark = pytest.mark.server_agnostic

ENV = "s3-test"
# Marts compared between the two warehouses (floats within REL_TOL).
COMPARED = ("figures", "measures", "run_environment", "figure_trends")
REL_TOL = 1e-9


def _measure(env: Environment, when: datetime) -> tuple[str, dict[str, pa.Table]]:
    """One real run's tables (fingerprint and a short round trip), as a flow hands them over."""
    run_id = lake.new_run_id(when)
    measured = [
        fingerprint.fn(env, None),
        round_trip.fn(env, RoundTripProfile(windows=2, window_s=0.1, interval_ms=0.5)),
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
            lake.write(lake_dir, table, ENV, run_id, data)
    lake.write(lake_dir, "runs", ENV, run_id, tables["runs"])  # last, as the flows do


def _marts(path: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(path), read_only=True)
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


def _layout(lake_dir: str | Path) -> list[tuple[str, str, str, str]]:
    """The lake's current files, by place (not by where the lake lives)."""
    return sorted((f.table, f.env, f.period, f.path.name) for f in lake.current_files(lake_dir))


KILLED_LANDING = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow as pa
    import s3fs
    from yardstick.storage import lake, lakefs
    from yardstick.storage.schemas import to_table

    lakefs.CHUNK_BYTES = 64 * 1024  # a multipart upload for this ~1 MB file
    real = s3fs.S3FileSystem._call_s3

    async def call(self, method, *args, **kwargs):
        out = await real(self, method, *args, **kwargs)
        if method == "upload_part":
            print("part uploaded", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # dies mid-stream, before the completion
        return out

    s3fs.S3FileSystem._call_s3 = call
    rows = [{"profile": "killed", "url": os.urandom(96).hex(), "status": "ok"}
            for _ in range(8000)]
    lake.write(sys.argv[1], "runs", sys.argv[2], sys.argv[3], to_table("runs", rows))
    print("landed", flush=True)
    """
)


def _kill_a_landing(url: str, run_id: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", KILLED_LANDING, url, ENV, run_id],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.e2e
def test_an_s3_lake_gives_the_warehouse_a_local_lake_gives(
    measured_runs, s3_lake, tmp_path, monkeypatch
):
    url, local = s3_lake("same"), tmp_path / "lake"
    first, second, third = measured_runs
    for run in (first, second):
        _land(local, run)
        _land(url, run)
    # A landing killed halfway through its upload: its run would enter the figures had any of
    # it become visible.
    killed = lake.new_run_id(datetime.now(UTC) - timedelta(hours=3, minutes=30))
    done = _kill_a_landing(url, killed)
    assert done.returncode == -9 and "part uploaded" in done.stdout, done.stderr
    assert killed not in {run for f in lake.scan(url) for run in f.runs}
    assert _layout(url) == _layout(local)

    # One file name for every warehouse (its stem is dbt's database name): dbt's parse of the
    # project is reused across them and the other tests.
    s3_wh, local_wh, rebuilt = (tmp_path / kind / "w.duckdb" for kind in ("s3", "local", "re"))
    warehouse.build(url, s3_wh)
    warehouse.build(local, local_wh)
    _same(_marts(s3_wh), _marts(local_wh))
    con = duckdb.connect(str(s3_wh), read_only=True)
    try:
        loaded = {r for (r,) in con.execute(f"select run_id from {warehouse.LOADED}").fetchall()}
        remembered = [p for (p,) in con.execute(f"select path from {warehouse.FILES}").fetchall()]
    finally:
        con.close()
    assert loaded == {first[0], second[0]}
    assert remembered and all(p.startswith(url + "/") for p in remembered)

    # A third run, compaction (which aborts the killed landing's upload and says so), retention
    # of every detail file the warehouse has (today: 40 days on), then the nightly update: the
    # same on both lakes, and on S3 what a rebuild from the S3 lake alone gives.
    _land(local, third)
    _land(url, third)
    monkeypatch.setattr(compaction, "STALE_TMP_S", 0.0)
    s3_report, local_report = compaction.compact(url), compaction.compact(local)
    assert s3_report.files_in == local_report.files_in > 0
    assert [r for r in s3_report.leftovers_removed if "unfinished upload" in r] == [
        f"runs/env={ENV}/period={lake.run_period(killed)}/{killed}.parquet (unfinished upload)"
    ]
    assert "files an interrupted compaction or landing had left" in s3_report.summary()
    root = lakefs.lake_root(url)
    uploads = lakefs.filesystem().call_s3(
        "list_multipart_uploads", Bucket=root.bucket, Prefix=root.prefix + "/"
    )
    assert not uploads.get("Uploads")
    later = (datetime.now(UTC) + timedelta(days=40)).date()
    s3_kept = retention.apply(url, s3_wh, detail_days=30, today=later)
    local_kept = retention.apply(local, local_wh, detail_days=30, today=later)
    assert s3_kept.files_dropped == local_kept.files_dropped > 0
    assert s3_kept.rows_retained == local_kept.rows_retained > 0
    assert _layout(url) == _layout(local)
    assert warehouse.update(url, s3_wh).mode == "incremental"
    warehouse.build(url, rebuilt)
    _same(_marts(rebuilt), _marts(s3_wh))

    # No credential in any object of the lake (footers included) nor in the warehouses.
    secrets = [os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_ACCESS_KEY_ID"]]
    fs = lakefs.filesystem()
    keys = fs.find(str(root))
    assert len(keys) > 5
    for key in keys:
        blob = fs.cat_file(key)
        assert not any(s.encode() in blob for s in secrets), key
    for path in tmp_path.glob("*/*.duckdb"):
        blob = path.read_bytes()
        assert not any(s.encode() in blob for s in secrets), path


def test_an_s3_landing_never_overwrites_even_when_racing(s3_lake, monkeypatch):
    url = s3_lake("race")
    run_id = lake.new_run_id()
    first = to_table("runs", [{"profile": "first", "status": "ok"}])
    second = to_table("runs", [{"profile": "second", "status": "ok"}])
    path = lake.write(url, "runs", ENV, run_id, first)
    assert isinstance(path, lakefs.ObjectPath) and str(path).startswith(url + "/runs/")
    with pytest.raises(lake.LakeConflict):
        lake.write(url, "runs", ENV, run_id, second)
    # The other writer's object appears between the check and the upload: the conditional
    # PUT (If-None-Match: *) refuses it all the same.
    monkeypatch.setattr(type(lakefs.filesystem()), "exists", lambda self, path: False)
    with pytest.raises(lake.LakeConflict):
        lake.write(url, "runs", ENV, run_id, second)
    monkeypatch.undo()
    assert lakefs.read_table(path)["profile"].to_pylist() == ["first"]


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
    root = lakefs.lake_root("s3://bucket/some/prefix/")
    assert isinstance(root, lakefs.ObjectPath) and str(root) == "s3://bucket/some/prefix"
    # What pathlib makes of the URL (Path("s3://b/p") is "s3:/b/p") names the same lake.
    assert lakefs.lake_root(Path("s3://bucket/some/prefix")) == root
    assert isinstance(lakefs.lake_root("lake"), Path) and not lakefs.is_remote("./lake")
    path = lake.file_path(root, "runs", "e", "20261129T224501Z-3f9a1c")
    assert (
        str(path)
        == "s3://bucket/some/prefix/runs/env=e/period=2026-11/20261129T224501Z-3f9a1c.parquet"
    )
    assert path.parents[2] == root / "runs" and path.stem == "20261129T224501Z-3f9a1c"
    assert str(path.relative_to(root / "runs")) == f"env=e/period=2026-11/{path.name}"
    with pytest.raises(ValueError, match="credentials in an s3:// URL are refused") as refused:
        lakefs.lake_root("s3://AKIAEXAMPLE:very-secret@bucket/lake")
    assert "very-secret" not in str(refused.value)


def test_one_machine_compacts_an_s3_lake_at_a_time(s3_lake):
    url = s3_lake("lock")
    with compaction.lake_lock(url) as held:
        assert held
        assert compaction.compact(url).skipped == compaction.LAKE_BUSY
    assert compaction.compact(url).skipped is None


def test_storage_errors_name_the_lake_path_not_the_endpoint():
    from botocore.exceptions import EndpointConnectionError

    path = lakefs.lake_root("s3://bucket/lake") / "runs"
    with pytest.raises(lakefs.StorageError) as failed, lakefs._storage("upload", path):
        raise EndpointConnectionError(endpoint_url="http://10.1.2.3:9000/bucket/lake/runs")
    assert str(failed.value) == (
        "s3://bucket/lake/runs: upload failed (the storage endpoint cannot be reached)"
    )


def test_two_machines_compacting_one_s3_lake_never_double_a_row(s3_lake, monkeypatch):
    url = s3_lake("two-machines")
    start = datetime(2026, 10, 28, 2, 0, tzinfo=UTC)
    landed = []
    for i in range(3):
        run_id = lake.new_run_id(start + timedelta(minutes=5 * i))
        steps = [{"family": "counters", "status": "ok", "started_at": start}]
        lake.write(url, "steps", ENV, run_id, to_table("steps", steps))
        lake.write(url, "runs", ENV, run_id, to_table("runs", [{"profile": "c", "status": "ok"}]))
        landed.append(run_id)

    @contextlib.contextmanager
    def other_machines_lock(lake_dir):
        yield True  # the lake lock is a file on each machine: the other one's is free

    monkeypatch.setattr(compaction, "lake_lock", other_machines_lock)
    read_tables, other = lakefs.read_tables, []

    def meanwhile(paths):
        if not other:  # the other machine runs a whole compaction between listing and reading
            other.append(None)
            other[0] = compaction.compact(url)
        return read_tables(paths)

    monkeypatch.setattr(lakefs, "read_tables", meanwhile)
    report = compaction.compact(url)
    assert other[0].partitions == 2 and report.partitions == 0
    period = lake.run_period(landed[0])
    assert report.conceded == [f"{t}/env={ENV}/period={period}" for t in ("runs", "steps")]
    assert "left 2 partitions to another machine's compaction" in report.summary()
    files = lake.current_files(url)
    assert [(f.table, f.kind) for f in files] == [("runs", "compacted"), ("steps", "compacted")]
    for f in files:
        assert sorted(lakefs.read_table(f.path)["run_id"].to_pylist()) == landed
