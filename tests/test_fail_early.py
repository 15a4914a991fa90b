"""Configuration found wrong before anything runs: an unset password variable and a directory
given as the warehouse file are one line, exit 2, no server contacted and nothing written;
`report`, `compact` and `check` read the environments file's `lake:`; `prune` covers every
flow the project deploys."""

from __future__ import annotations

import importlib
import os
import socket
import threading

import pytest
import yaml
from conftest import REPO, finish, start_yardstick, write_config
from typer.testing import CliRunner

from yardstick.app import cli
from yardstick.flows.prune import YARDSTICK_FLOWS
from yardstick.flows.targets import check_secrets
from yardstick.settings.config import ConfigError, load_config


class _Listener:
    """A TCP port that counts the connections it is offered (nothing may connect)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.done.set()
        self.thread.join(5)
        self.sock.close()


def test_unset_secrets_and_a_warehouse_directory_are_one_line_before_anything(tmp_path):
    listener = _Listener()
    try:
        config = write_config(
            tmp_path / "envs.yaml",
            [
                {
                    "name": "cache",
                    "url": f"redis://127.0.0.1:{listener.port}/0",
                    "mode": "read-only",
                    "password_env": "YS_FAIL_EARLY_UNSET",
                },
                # Another site's secrets live on that site's machine: not asked for here.
                {
                    "name": "far",
                    "url": f"redis://127.0.0.1:{listener.port}/1",
                    "mode": "read-only",
                    "password_env": "YS_FAIL_EARLY_FAR",
                    "site": "eu-west",
                },
            ],
        )
        (tmp_path / "wh").mkdir()
        before = sorted(p.name for p in tmp_path.iterdir())
        process = start_yardstick(
            tmp_path,
            "run",
            "--config",
            str(config),
            "--profile",
            "quick",
            "--lake",
            str(tmp_path / "lake"),
            "--warehouse",
            str(tmp_path / "wh"),
            "--out",
            str(tmp_path / "out"),
            "--state-dir",
            str(tmp_path / "state"),
        )
        assert "YS_FAIL_EARLY_UNSET" not in os.environ
        result = finish(process, timeout=120)
    finally:
        listener.close()
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stdout + result.stderr
    # Both problems in the one line: the environment and its variable, the directory.
    assert "'cache'" in line and "YS_FAIL_EARLY_UNSET" in line and "password_env" in line
    assert f"{tmp_path / 'wh'}: is a directory" in line
    assert "YS_FAIL_EARLY_FAR" not in line  # site eu-west checks its own
    assert listener.accepted == 0
    # Nothing was created: no lake, no output, no Prefect state, no hidden rebuild folder.
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert list((tmp_path / "wh").iterdir()) == []


def test_each_problem_alone_is_one_line(tmp_path, monkeypatch):
    runner = CliRunner()
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "cache",
                "url": "redis://127.0.0.1:1/0",
                "mode": "read-only",
                "sentinel": {"master": "m", "nodes": ["127.0.0.1:1"], "password_env": "YS_S"},
            }
        ],
    )
    monkeypatch.delenv("YS_S", raising=False)
    result = runner.invoke(cli.app, ["run", "--config", str(config), "--warehouse", str(tmp_path)])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "'sentinel.password_env': variable YS_S is not set" in line
    with pytest.raises(ConfigError, match="environment 'cache', field 'sentinel.password_env'"):
        check_secrets(load_config(config).environments, str(config))
    monkeypatch.setenv("YS_S", "")  # set, even empty: the server decides
    check_secrets(load_config(config).environments, str(config))

    # A file where the output folder goes; a directory as the warehouse of report/check.
    (tmp_path / "out").write_text("in the way")
    result = runner.invoke(
        cli.app, ["run", "--out", str(tmp_path / "out"), "--lake", str(tmp_path / "lake")]
    )
    assert result.exit_code == 2 and "is a file, not a folder" in result.stderr
    assert not (tmp_path / "lake").exists()
    for command in (["report"], ["check"], ["compact"]):
        result = runner.invoke(cli.app, [*command, "--warehouse", str(tmp_path)])
        assert result.exit_code == 2, (command, result.output)
        assert f"{tmp_path}: is a directory" in result.stderr
        assert not list(tmp_path.glob(".*.building"))


def test_report_compact_and_check_use_the_configs_lake(tmp_path, monkeypatch):
    """`--config` gives the lake (said on screen); --lake wins; a warehouse built from an S3
    lake is not silently rebuilt from a stale local ./lake."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    real = tmp_path / "shared" / "lake"
    (tmp_path / "lake").mkdir()  # the stale local one
    config = tmp_path / "envs.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "lake": str(real),
                "environments": [{"name": "a", "url": "redis://127.0.0.1:1/0", "mode": "scratch"}],
            }
        )
    )
    result = runner.invoke(cli.app, ["report", "--config", str(config)])
    assert result.exit_code == 2
    assert f"lake: {real} (`lake:` of {config})" in result.stdout
    assert f"{real}: no lake here" in result.stderr
    result = runner.invoke(cli.app, ["compact", "--config", str(config), "--no-update"])
    assert result.exit_code == 2 and f"{real}: no lake here" in result.stderr
    # --lake wins over the file's.
    result = runner.invoke(
        cli.app, ["compact", "--config", str(config), "--lake", "lake", "--no-update"]
    )
    assert "lake: lake (--lake)" in result.stdout

    # A warehouse that records an S3 lake: `report` without --config/--lake refuses.
    import duckdb

    from yardstick.storage.warehouse import META

    con = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    con.execute("create schema yardstick")
    con.execute(f"create table {META} (key varchar, value varchar)")
    con.execute(f"insert into {META} values ('lake', 's3://bucket/prod')")
    con.close()
    for command in ("report", "compact"):
        result = runner.invoke(cli.app, [command])
        assert result.exit_code == 2, result.output
        assert "built from lake s3://bucket/prod, not ./lake" in result.stderr
    result = runner.invoke(cli.app, ["check", "--config", str(config)])
    assert result.exit_code == 2
    assert f"built from lake s3://bucket/prod, not {real}" in result.stderr


def test_prune_covers_every_deployed_flow():
    deployed = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    names = set()
    for deployment in deployed:
        path, function = deployment["entrypoint"].split(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        names.add(getattr(module, function).name)
    assert {"yardstick-nightly", "yardstick-measure-site", "yardstick-prune"} <= names
    assert names <= set(YARDSTICK_FLOWS), names - set(YARDSTICK_FLOWS)
