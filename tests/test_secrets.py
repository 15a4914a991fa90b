"""Passwords come from the variable named by password_env and never reach the lake, the
warehouse, the reports or the logs; a wrong one fails only its environment (an unset
variable stops the run before it starts: tests/test_fail_early.py)."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import open_warehouse, run_nightly, warehouse_relations, write_config

pytestmark = pytest.mark.e2e


def _parquet_text(path: Path) -> str:
    """Every value of a (compressed) Parquet file, as text."""
    return repr(pq.read_table(path).to_pylist())


def _warehouse_text(path: Path) -> str:
    """Every row of every table and view in the warehouse, as text."""
    con = open_warehouse(path)
    try:
        names = warehouse_relations(con)
        assert '"marts"."figures"' in names and '"raw"."raw_runs"' in names
        return "\n".join(repr(con.execute(f"select * from {n}").fetchall()) for n in names)
    finally:
        con.close()


def test_passwords_stay_secret_and_bad_ones_fail_only_their_environment(
    prefect_server, start_redis, tmp_path, monkeypatch, caplog, capfd
):
    password = "pw-" + secrets.token_urlsafe(24)
    wrong = "wrong-" + secrets.token_urlsafe(24)
    server = start_redis(extra_args=["--requirepass", password])
    monkeypatch.setenv("YS_TEST_PASSWORD", password)
    monkeypatch.setenv("YS_TEST_WRONG_PASSWORD", wrong)
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "auth-ok",
                "url": server.url,
                "mode": "scratch",
                "password_env": "YS_TEST_PASSWORD",
            },
            {
                "name": "auth-ro",
                "url": server.url,
                "mode": "read-only",
                "password_env": "YS_TEST_PASSWORD",
            },
            {
                "name": "auth-wrong",
                "url": server.url,
                "mode": "read-only",
                "password_env": "YS_TEST_WRONG_PASSWORD",
            },
        ],
    )
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="prefect")
    state, summary = run_nightly(tmp_path, config_path=str(config))
    captured = capfd.readouterr()

    # Outcomes: the right password measures (scratch and through the read-only guard).
    assert state.is_failed()
    outcomes = {o.env: o for o in summary.outcomes}
    assert outcomes["auth-ok"].status == "ok", outcomes["auth-ok"].error
    assert outcomes["auth-ro"].status == "ok", outcomes["auth-ro"].error
    assert outcomes["auth-wrong"].status == "failed"
    assert "auth" in outcomes["auth-wrong"].error.lower()
    report = (tmp_path / "out" / "auth-wrong.md").read_text()
    assert outcomes["auth-wrong"].error.split(": ", 1)[-1] in report
    assert "`client_over_server_ping`" in (tmp_path / "out" / "auth-ok.md").read_text()

    # Neither password appears anywhere the run wrote or logged.
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in written) and any(p.suffix == ".md" for p in written)
    texts = {"logs": caplog.text, "stdout": captured.out, "stderr": captured.err}
    for path in written:
        texts[str(path)] = path.read_bytes().decode("latin-1")
        if path.suffix == ".parquet":
            texts[f"{path} (decoded)"] = _parquet_text(path)
    texts["warehouse (decoded)"] = _warehouse_text(tmp_path / "warehouse.duckdb")
    texts["summary"] = summary.model_dump_json()
    assert len(caplog.records) > 0
    for secret in (password, wrong):
        leaks = [where for where, text in texts.items() if secret in text]
        assert leaks == [], f"password found in {leaks}"
    # The logs above really hold the run's warnings: the check is not vacuous.
    assert "auth-wrong" in caplog.text
