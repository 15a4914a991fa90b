"""The `yardstick` command as a user meets it: run, report, trend."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import duckdb
import pytest
import redis
from conftest import finish, run_paths, start_yardstick, write_config
from typer.testing import CliRunner

from yardstick.app import cli
from yardstick.host.embedded import free_port

pytestmark = pytest.mark.e2e


def _yardstick(cwd: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run the installed `yardstick` script as a user would, with no Prefect settings inherited."""
    return finish(start_yardstick(cwd, *args), timeout)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (
            "environments:\n  - name: a\n    url: redis://127.0.0.1:1/0\n    mode: scratch\n"
            "    colour: red\n",
            "environment 'a', field 'colour': unknown field",
        ),
        ("environments:\n  - name: a\n    url: [oops\n", "not valid YAML at line"),
        (
            "environments:\n  - name: 'a[b]'\n    url: redis://127.0.0.1:1/0\n    mode: scratch\n",
            "environment 'a[b]', field 'name'",
        ),
    ],
)
def test_bad_config_is_one_line_exit_2_and_nothing_lands(tmp_path, content, says):
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    result = _yardstick(tmp_path, "run", "--config", str(config), *run_paths(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {config}: ") and says in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    # Validation happened before Prefect or the lake: nothing was created.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_missing_config_and_unknown_env_and_profile_are_one_line():
    runner = CliRunner()
    result = runner.invoke(cli.app, ["run", "--config", "/nonexistent/envs.yaml"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: /nonexistent/envs.yaml: file not found"]
    result = runner.invoke(cli.app, ["run", "--profile", "weekly"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "'weekly'" in result.stderr and "quick" in result.stderr
    # Without --config the only environment is the embedded one; said before Prefect starts.
    result = runner.invoke(cli.app, ["run", "--env", "prod", "--profile", "quick"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: --env: no environment 'prod' without --config (known: embedded)"
    ]


def test_unknown_env_lists_the_known_names(tmp_path):
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {"name": n, "url": f"redis://127.0.0.1:{6390 + i}/0", "mode": "scratch"}
            for i, n in enumerate(["cache-eu", "cache-us", "sessions"])
        ],
    )
    runner = CliRunner()
    result = runner.invoke(
        cli.app, ["run", "--config", str(config), "--env", "nosuch", *run_paths(tmp_path)]
    )
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {config}: no environment 'nosuch' (known: cache-eu, cache-us, sessions)"
    ]
    result = runner.invoke(
        cli.app, ["run", "--config", str(config), "--env", "cache-uk", *run_paths(tmp_path)]
    )
    assert result.exit_code == 2 and "cache-eu" in result.stderr and "cache-us" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["envs.yaml"]


# The CLI's exit codes, report and trend commands: the server's kind changes none of it.
@pytest.mark.server_agnostic
def test_run_with_a_dead_environment_then_report_and_trend(
    redis_server, start_redis, tmp_path, monkeypatch
):
    frozen = start_redis()
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {"name": "good", "url": redis_server.url, "mode": "read-only"},  # a short run
            {"name": "dead", "url": f"redis://127.0.0.1:{free_port()}/0", "mode": "scratch"},
            # A server frozen mid-life (SIGSTOP): it accepts connections and never answers.
            {
                "name": "frozen",
                "url": frozen.url,
                "mode": "scratch",
                "families": ["fingerprint", "slowlog", "throughput"],
            },
            # Its run row cannot land (a file where its folder goes): the others still do.
            {
                "name": "unlandable",
                "url": redis_server.url,
                "mode": "read-only",
                "families": ["fingerprint"],
            },
        ],
    )
    (tmp_path / "lake" / "runs").mkdir(parents=True)
    (tmp_path / "lake" / "runs" / "env=unlandable").write_text("in the way")
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        result = _yardstick(
            tmp_path, "run", "--config", str(config), "--profile", "quick", *run_paths(tmp_path)
        )
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    # One environment failed: the run says so with its exit code, after reporting.
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout
    assert "not landed" in result.stdout + result.stderr
    runs = (
        duckdb.connect()
        .execute(
            "select regexp_extract(filename, 'env=([^/]+)', 1), status, duration_s"
            f" from read_parquet('{tmp_path}/lake/runs/**/*.parquet', filename=true)"
        )
        .fetchall()
    )
    by_env = {env: (status, duration_s) for env, status, duration_s in runs}
    assert set(by_env) == {"good", "dead", "frozen"}
    # The frozen server is given up on within the host lock's 5 s question, not per family.
    assert by_env["frozen"][0] == "failed" and by_env["frozen"][1] < 15
    assert "TimeoutError" in (tmp_path / "out" / "frozen.md").read_text()
    out, warehouse = tmp_path / "out", tmp_path / "w.duckdb"
    assert {"good.md", "dead.md", "index.md"} <= {p.name for p in out.iterdir()}
    # Without PREFECT_API_URL no Prefect server ran: no Prefect database was made.
    assert not list(tmp_path.rglob("prefect.db"))
    (run_id,) = (
        duckdb.connect()
        .execute(
            "select distinct run_id from read_parquet("
            f"'{tmp_path}/lake/runs/env=good/**/*.parquet')"
        )
        .fetchone()
    )

    runner = CliRunner()
    monkeypatch.setattr(cli.console, "width", 200)  # keep table cells on one line
    trend = ["trend", "--env", "good", "--warehouse", str(warehouse)]
    result = runner.invoke(cli.app, [*trend, "--figure", "rtt_client_p99_us"])
    assert result.exit_code == 0, result.output
    assert "rtt_client_p99_us on good" in result.stdout and run_id in result.stdout
    result = runner.invoke(
        cli.app, [*trend, "--figure", "rtt_client_p99_us", "--since", "2999-01-01"]
    )
    assert result.exit_code == 0 and "no history" in result.stdout
    # Every listing as JSON parses; as text off a terminal nothing is cut to fit 80 columns.
    result = runner.invoke(cli.app, [*trend, "--figure", "rtt_client_p99_us", "--format", "json"])
    assert result.exit_code == 0, result.output
    history = json.loads(result.stdout)
    assert history["figure"] == "rtt_client_p99_us" and history["points"][0]["run_id"] == run_id
    # Keys a program can name (once the table's headings: "started (UTC)", "rolling median").
    assert list(history["points"][0]) == [
        "started_utc", "run_id", "value", "n", "min", "max", "rolling_median", "server", "markers"
    ]  # fmt: skip
    # An empty CSV still has its header (it once printed nothing at all).
    result = runner.invoke(
        cli.app,
        [*trend, "--figure", "rtt_client_p99_us", "--since", "2999-01-01", "--format", "csv"],
    )
    assert result.exit_code == 0 and result.stdout.splitlines()[0].startswith("started_utc,run_id")
    result = runner.invoke(
        cli.app, ["changes", "--warehouse", str(warehouse), "--env", "good", "--format", "csv"]
    )
    assert {"env", "figure", "verdict"} <= set(result.stdout.splitlines()[0].split(","))
    changes = ["changes", "--all", "--warehouse", str(warehouse)]
    result = runner.invoke(cli.app, [*changes, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    verdicts = json.loads(result.stdout)
    assert {v["env"] for v in verdicts["verdicts"]} >= {"good"}
    assert {r["env"] for r in verdicts["changes"]} >= {"good"}
    result = runner.invoke(cli.app, [*changes, "--format", "csv"])
    header = result.stdout.splitlines()[0].split(",")
    assert {"env", "figure", "verdict"} <= set(header)
    monkeypatch.setattr(cli.console, "width", 80)
    result = runner.invoke(cli.app, changes)
    assert "…" not in result.stdout and max(map(len, result.stdout.splitlines())) > 80

    result = runner.invoke(cli.app, [*trend, "--figure", "rtt_p99"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "no figure 'rtt_p99'" in line and "rtt_client_p99_us" in line
    result = runner.invoke(
        cli.app,
        ["trend", "--env", "goood", "--figure", "rtt_client_p99_us", "--warehouse", str(warehouse)],
    )
    assert result.exit_code == 2 and "did you mean: good" in result.stderr

    # `report` rebuilds warehouse and reports from the lake alone.
    good_report = (out / "good.md").read_text()
    shutil.rmtree(out)
    warehouse.unlink()
    result = runner.invoke(
        cli.app,
        [
            "report",
            "--lake",
            str(tmp_path / "lake"),
            "--warehouse",
            str(warehouse),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert warehouse.is_file()
    assert {"good.md", "dead.md", "index.md"} <= {p.name for p in out.iterdir()}
    # The same report, but for the tool's own cost: the run showed its warehouse phase from
    # its meter and could not show its rendering; the lake has both since (docs/reports.md).
    own_cost = re.compile(r"## The tool's own cost\n.*?(?=\n## )", re.S)
    rebuilt = (out / "good.md").read_text()
    assert own_cost.sub("", rebuilt) == own_cost.sub("", good_report)
    assert "| rendering |" in own_cost.search(rebuilt).group(0)
    assert "**dead**" in (out / "index.md").read_text()
    result = runner.invoke(cli.app, [*trend, "--figure", "rtt_client_p99_us"])
    assert result.exit_code == 0 and run_id in result.stdout


def test_report_and_trend_without_data_are_one_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli.app, ["report", "--lake", str(tmp_path / "nolake")])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    # A damaged table log (a stray Parquet file is no damage: a Delta reader ignores files its
    # log does not name).
    corrupt = tmp_path / "lake" / "runs" / "_delta_log" / "00000000000000000000.json"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"not json")
    result = runner.invoke(
        cli.app,
        [
            "report",
            "--lake",
            str(tmp_path / "lake"),
            "--warehouse",
            str(tmp_path / "w.duckdb"),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    # Refused by the lake's log check (storage/loghealth.py) before the warehouse is touched.
    assert result.exit_code == 1 and "table runs" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "w.duckdb").exists() and not (tmp_path / "out").exists()
    result = runner.invoke(
        cli.app,
        ["trend", "--env", "a", "--figure", "b", "--warehouse", str(tmp_path / "none.duckdb")],
    )
    assert result.exit_code == 2 and "no warehouse yet" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_an_unwritable_lake_is_one_line_before_any_server_is_touched(redis_server, tmp_path):
    # Issue 16: found after the families, an unwritable lake cost a whole run. A lake path
    # under a regular file cannot be created, whoever runs (root included).
    (tmp_path / "afile").write_text("")
    config = write_config(
        tmp_path / "envs.yaml", [{"name": "s", "url": redis_server.url, "mode": "scratch"}]
    )
    observer = redis.Redis(port=redis_server.port, decode_responses=True)
    before = observer.info("stats")["total_connections_received"]
    result = _yardstick(
        tmp_path,
        "run",
        "--config",
        str(config),
        "--profile",
        "quick",
        *run_paths(tmp_path),
        "--lake",
        str(tmp_path / "afile" / "lake"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: lake ") and "cannot be written" in line
    # Only the observer's own connection ever reached the server.
    assert observer.info("stats")["total_connections_received"] == before
    observer.close()


def test_too_little_free_space_is_one_line_naming_the_folder(tmp_path):
    from yardstick.storage.preflight import NotWritable, check_writable

    with pytest.raises(NotWritable, match=r"^output folder .*: only \d+ MiB free"):
        check_writable({"output folder": tmp_path / "out"}, min_free_bytes=1 << 62)
    assert not list((tmp_path / "out").iterdir())  # the probe file is gone


@pytest.mark.server_agnostic
def test_collect_lands_one_collection(redis_server, tmp_path):
    config = write_config(
        tmp_path / "envs.yaml", [{"name": "c", "url": redis_server.url, "mode": "read-only"}]
    )
    lake = tmp_path / "lake"
    result = _yardstick(
        tmp_path,
        "collect",
        "--config",
        str(config),
        "--lake",
        str(lake),
        "--state-dir",
        str(tmp_path / "state"),
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert [o["env"] for o in summary["outcomes"]] == ["c"]
    assert summary["outcomes"][0]["status"] == "ok"
    (profile,) = (
        duckdb.connect()
        .execute(f"select distinct profile from read_parquet('{lake}/runs/**/*.parquet')")
        .fetchone()
    )
    assert profile == "collect"
    assert list(lake.glob("slowlog*/env=c/**/*.parquet"))
