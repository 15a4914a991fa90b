"""Least privilege: a read-only environment measured by an ACL user allowed exactly what the
read-only families send (the rule documented in docs/access.md) refuses nothing; the same user
without CONFIG GET still measures, and the report says which settings it could not read
instead of guessing them."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import redis
from conftest import REPO, run_nightly, write_config

pytestmark = pytest.mark.e2e

READER = "yardstick-reader"
NO_CONFIG = "yardstick-reader-noconfig"
# The commands of every read-only family (fingerprint, round_trip, slowlog, latency_monitor,
# counters, keyspace), and of the connection set-up (AUTH is always allowed).
COMMANDS = (
    "-@all +ping +echo +info +config|get +slowlog|get +slowlog|len +latency|latest "
    "+latency|history +latency|doctor +scan +dbsize +type +object|encoding +memory|usage "
    "+strlen +llen +hlen +scard +zcard +xlen +command|info +command|docs +client|setname +select"
)
# redis-py sends CLIENT SETINFO on every connection (and ignores a refusal): 6.2 checks the
# ACL before the subcommand exists, so it must be allowed there; 7.0 has no such subcommand
# and refuses the rule naming it (7.2+ has it again: documented, not installed here).
SETINFO = " +client|setinfo"


def reader_rule(version: tuple[int, ...]) -> str:
    """The documented rule (after `ACL SETUSER yardstick-reader on >password`) for a server:
    keys read-only on 7.0+ (`%R~*`); Redis 6.2 knows only `~*` (the commands above are what
    keeps the user from writing)."""
    if version >= (7, 0):
        # 7.2+: CLIENT NO-TOUCH keeps the key-space scan off the keys' LRU/LFU clocks.
        no_touch = f"{SETINFO} +client|no-touch" if version >= (7, 2) else ""
        return f"%R~* resetchannels {COMMANDS}{no_touch}"
    return f"~* resetchannels {COMMANDS}{SETINFO}"


def test_docs_document_the_tested_rules():
    docs = (REPO / "docs" / "access.md").read_text()
    for version in ((7, 0, 15), (6, 2, 14), (7, 2, 0)):
        assert f"ACL SETUSER yardstick-reader on >password {reader_rule(version)}" in docs


def _fill(admin: redis.Redis) -> None:
    """One key of every type the key-space scan sizes, and something slow to log."""
    admin.set("app:string", "v" * 40)
    admin.rpush("app:list", *range(20))
    admin.hset("app:hash", mapping={f"f{i}": i for i in range(20)})
    admin.sadd("app:set", *range(20))
    admin.zadd("app:zset", {f"m{i}": i for i in range(20)})
    admin.xadd("app:stream", {"a": "1"})
    admin.config_set("slowlog-log-slower-than", "0")  # every command is logged
    admin.config_set("latency-monitor-threshold", "1")
    # A few busy milliseconds: one latency event, for LATENCY HISTORY to read back.
    admin.eval("local i = 0 while i < 3000000 do i = i + 1 end", 0)


def _refusals(admin: redis.Redis, user: str) -> list[dict]:
    """ACL LOG entries of `user`: every command, key or channel the server refused it."""
    return [entry for entry in admin.acl_log(count=1000) if entry.get("username") == user]


def test_read_only_nightly_as_a_least_privilege_user(
    prefect_server, start_redis, tmp_path, monkeypatch
):
    admin_pw = "admin-" + secrets.token_urlsafe(16)
    reader_pw = "reader-" + secrets.token_urlsafe(16)
    server = start_redis(extra_args=["--requirepass", admin_pw])
    admin = redis.Redis(port=server.port, password=admin_pw, decode_responses=True)
    version = tuple(int(p) for p in admin.info("server")["redis_version"].split("."))
    rule = reader_rule(version)
    admin.execute_command("ACL", "SETUSER", READER, "on", f">{reader_pw}", *rule.split())
    # Point 3: the same user without CONFIG GET (as on managed services).
    no_config = rule.replace(" +config|get", "")
    admin.execute_command("ACL", "SETUSER", NO_CONFIG, "on", f">{reader_pw}", *no_config.split())
    assert (
        admin.config_get("save")["save"] == ""
        and admin.config_get("appendonly")["appendonly"] == "no"
    )
    _fill(admin)
    admin.acl_log_reset()
    errors_before = admin.info("errorstats")
    monkeypatch.setenv("YS_READER_PASSWORD", reader_pw)
    host = server.url.removeprefix("redis://")
    config = write_config(
        tmp_path / "envs.yaml",
        [
            {
                "name": "ro-least",
                "url": f"redis://{READER}@{host}",
                "mode": "read-only",
                "password_env": "YS_READER_PASSWORD",
            },
            {
                "name": "ro-noconfig",
                "url": f"redis://{NO_CONFIG}@{host}",
                "mode": "read-only",
                "password_env": "YS_READER_PASSWORD",
            },
        ],
    )

    state, summary = run_nightly(tmp_path, config_path=str(config))
    outcomes = {o.env: o for o in summary.outcomes}

    # The documented rule: every read-only family ran, and the server refused nothing.
    assert outcomes["ro-least"].status == "ok", outcomes["ro-least"].error
    assert _refusals(admin, READER) == []
    report = (tmp_path / "out" / "ro-least.md").read_text()
    for family in (
        "fingerprint",
        "round_trip",
        "slowlog",
        "latency_monitor",
        "counters",
        "keyspace",
    ):
        assert f"| {family} | ok |" in report, family
    assert '| Persistence | off (save "", appendonly no' in report

    # Without CONFIG GET: the settings are said to be unknown, never guessed.
    refused = _refusals(admin, NO_CONFIG)
    assert refused and {e["object"] for e in refused} <= {"config|get", "config"}
    # Every NOPERM the server answered during the run was one of these (INFO errorstats is
    # server-wide): none was the least-privilege user's.
    noperm = admin.info("errorstats").get("errorstat_NOPERM", {}).get("count", 0) - (
        errors_before.get("errorstat_NOPERM", {}).get("count", 0)
    )
    assert noperm == sum(int(e["count"]) for e in refused)
    ro_report = (tmp_path / "out" / "ro-noconfig.md").read_text()
    persistence = next(line for line in ro_report.splitlines() if line.startswith("| Persistence"))
    assert "unknown (CONFIG not permitted)" in persistence and " on " not in persistence
    thresholds = next(line for line in ro_report.splitlines() if line.startswith("| Thresholds"))
    assert thresholds.count("unknown (CONFIG not permitted)") == 3
    memory = next(line for line in ro_report.splitlines() if line.startswith("| Memory"))
    assert "maxmemory-policy unknown (CONFIG not permitted)" in memory
    assert state is not None
    assert not Path(tmp_path / "out" / "index.md").read_text().count(reader_pw)
