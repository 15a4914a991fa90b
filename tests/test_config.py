"""A bad environments file stops everything with one line naming file, environment and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import write_config

from yardstick.settings.config import ConfigError, load_config

GOOD = {"name": "a", "url": "redis://127.0.0.1:6390/0", "mode": "scratch"}


def _error(path: Path) -> str:
    """The ConfigError text load_config raises for `path` (fails the test if none)."""
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "\n" not in text, text
    assert text.startswith(f"{path}: "), text
    return text


@pytest.mark.parametrize(
    ("envs", "env_label", "field", "says"),
    [
        ([{**GOOD, "colour": "red"}], "'a'", "colour", "unknown field"),
        ([GOOD, {**GOOD, "url": "redis://127.0.0.1:6391/0"}], "'a'", "name", "duplicate name"),
        ([{**GOOD, "url": "http://127.0.0.1:6390/0"}], "'a'", "url", "redis://"),
        ([{**GOOD, "url": "redis://127.0.0.1:99999/0"}], "'a'", "url", "port"),
        ([{**GOOD, "url": "redis://127.0.0.1:6390/zero"}], "'a'", "url", "not a number"),
        ([{**GOOD, "same_server_as": "nowhere"}], "'a'", "same_server_as", "nowhere"),
        ([{**GOOD, "same_server_as": "a"}], "'a'", "same_server_as", "itself"),
        (
            [{**GOOD, "site": "eu"}, {**GOOD, "name": "b", "same_server_as": "a"}],
            "'b'",
            "same_server_as",
            "not this site",
        ),
        ([{**GOOD, "site": "eu west"}], "'a'", "site", "not allowed"),
        ([{**GOOD, "mode": "readonly"}], "'a'", "mode", "read-only"),
        ([{**GOOD, "name": "prod/cache 1"}], "'prod/cache 1'", "name", "not allowed"),
        ([{**GOOD, "name": "-leading"}], "'-leading'", "name", "not allowed"),
        ([{**GOOD, "password_env": "MY-PASSWORD"}], "'a'", "password_env", "not allowed"),
        ([{"name": "a", "mode": "scratch"}], "'a'", "url", "missing"),
        ([GOOD, {"url": "redis://127.0.0.1:1/0", "mode": "scratch"}], "#2", "name", "missing"),
        # Their reports would be overwritten by index.md and comparison.md.
        ([{**GOOD, "name": "index"}], "'index'", "name", "reserved"),
        ([{**GOOD, "name": "Comparison"}], "'Comparison'", "name", "comparison.md"),
    ],
)
def test_bad_environment_names_file_environment_and_field(tmp_path, envs, env_label, field, says):
    path = write_config(tmp_path / "envs.yaml", envs)
    text = _error(path)
    assert f"environment {env_label}" in text
    assert f"field '{field}'" in text
    assert says in text


def test_url_with_inline_password_is_refused_without_echoing_it(tmp_path):
    for url in (
        "redis://:hunter2-secret@127.0.0.1:6390/0",
        "rediss://bob:hunter2-secret@h:1/0",
        # redis-py authenticates with a password in the query string too.
        "redis://127.0.0.1:6390/0?password=hunter2-secret",
        "redis://127.0.0.1:6390/0?username=bob&password=hunter2-secret",
        "redis://127.0.0.1:6390/0?socket_timeout=1&PassWord=hunter2-secret",
        "rediss://bob@h:1/0?pass%77ord=hunter2-secret",
    ):
        path = write_config(tmp_path / "envs.yaml", [{**GOOD, "url": url}])
        text = _error(path)
        assert "field 'url'" in text and "password_env" in text
        assert "hunter2-secret" not in text


def test_a_key_written_twice_is_refused_not_last_one_wins(tmp_path):
    # With plain yaml.safe_load the second `mode` would silently make this a scratch server.
    path = tmp_path / "envs.yaml"
    path.write_text(
        "environments:\n"
        "  - name: prod\n"
        "    url: redis://127.0.0.1:6390/0\n"
        "    mode: read-only\n"
        "    mode: scratch\n"
    )
    text = _error(path)
    assert "duplicate key 'mode'" in text and "line 5" in text


def test_yaml_merge_keys_still_work(tmp_path):
    path = tmp_path / "envs.yaml"
    path.write_text(
        "environments:\n"
        "  - &base {name: a, url: 'redis://127.0.0.1:6390/0', mode: read-only}\n"
        "  - <<: *base\n"
        "    name: b\n"
        "    mode: scratch\n"
    )
    envs = load_config(path).environments
    assert [(e.name, e.mode, e.port) for e in envs] == [
        ("a", "read-only", 6390),
        ("b", "scratch", 6390),
    ]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("environments:\n  - name: a\n    url: [redis\n", "not valid YAML at line"),
        ("environments:\n\t- name: a\n", "not valid YAML at line 2"),
        ("", "expected a mapping"),
        ("# only a comment\n", "expected a mapping"),
        ("- name: a\n", "expected a mapping"),
        ("environments: []\n", "field 'environments'"),
        ("environment:\n  - name: a\n", "field 'environments': required field is missing"),
        (b"\xff\xfeenvironments: []\n", "not UTF-8"),
    ],
)
def test_unreadable_files_give_one_line(tmp_path, content, says):
    path = tmp_path / "envs.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    assert says in _error(path)


def test_missing_file_and_directory(tmp_path):
    assert "file not found" in _error(tmp_path / "nope.yaml")
    assert "cannot read" in _error(tmp_path)


def test_several_problems_are_counted_on_the_same_line(tmp_path):
    path = write_config(tmp_path / "envs.yaml", [{**GOOD, "mode": "x", "colour": "red"}])
    assert "(and 1 more problem)" in _error(path)


def test_a_good_file_gives_what_it_says(tmp_path):
    path = write_config(
        tmp_path / "envs.yaml",
        [
            GOOD,
            {
                **GOOD,
                "name": "a-fwd",
                "url": "redis://localhost:6398/2",
                "transport": "ssh",
                "same_server_as": "a",
            },
            {
                "name": "site",
                "url": "rediss://reader@redis.example.internal:6380/0",
                "mode": "read-only",
                "password_env": "SITE_PW",
            },
        ],
    )
    a, fwd, site = load_config(path).environments
    assert (a.host, a.port, a.db, a.on_server_host) == ("127.0.0.1", 6390, 0, True)
    # A declared transport other than direct means the prober is not on the server host.
    assert (fwd.db, fwd.is_loopback, fwd.transport_label, fwd.on_server_host) == (
        2,
        True,
        "ssh",
        False,
    )
    assert (site.uses_tls, site.is_loopback, site.on_server_host) == (True, False, False)
    assert site.url_redacted == "rediss://reader@redis.example.internal:6380/0"


# --- TLS -----------------------------------------------------------------------------------

TLS_ENV = {**GOOD, "url": "rediss://redis.test:6380/0"}


def _pem_files(folder: Path) -> dict[str, str]:
    """Stand-ins for the PEM files: the config checks that they exist, not what they hold."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("ca.pem", "client.pem", "client.key"):
        (folder / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return {"ca_file": "ca.pem", "cert_file": "client.pem", "key_file": "client.key"}


@pytest.mark.parametrize(
    ("env", "tls", "field", "says"),
    [
        (GOOD, {"ca_file": "ca.pem"}, "tls", "needs a rediss:// URL"),
        (TLS_ENV, {"cert_file": "client.pem"}, "tls.key_file", "cert_file needs its key_file"),
        (TLS_ENV, {"key_file": "client.key"}, "tls.cert_file", "key_file needs its cert_file"),
        (TLS_ENV, {"ca_file": "nowhere.pem"}, "tls.ca_file", "no such file"),
        (
            TLS_ENV,
            {"cert_file": "client.pem", "key_file": "gone.key"},
            "tls.key_file",
            "no such file",
        ),
        (TLS_ENV, {"verify": "sometimes"}, "tls.verify", "bool"),
        (TLS_ENV, {"sni": "redis.test"}, "tls.sni", "unknown field"),
        # redis-py would read these from the URL, the C tools would not: one place only.
        (
            {**TLS_ENV, "url": "rediss://redis.test:6380/0?ssl_cert_reqs=none"},
            None,
            "url",
            "ssl_cert_reqs",
        ),
    ],
)
def test_bad_tls_settings_name_environment_and_field(tmp_path, env, tls, field, says):
    _pem_files(tmp_path)
    entry = {**env, "tls": tls} if tls is not None else env
    text = _error(write_config(tmp_path / "envs.yaml", [entry]))
    assert f"environment 'a', field '{field}'" in text
    assert says in text


def test_tls_files_are_found_beside_the_environments_file(tmp_path, monkeypatch):
    folder = tmp_path / "conf"
    tls = _pem_files(folder)
    path = write_config(folder / "envs.yaml", [{**TLS_ENV, "tls": {**tls, "verify": False}}])
    monkeypatch.chdir(tmp_path)  # not the file's folder: relative paths are the file's
    (env,) = load_config(path).environments
    assert env.tls.ca_file == folder / "ca.pem" and env.tls.ca_file.is_absolute()
    assert (env.tls.cert_file, env.tls.key_file) == (folder / "client.pem", folder / "client.key")
    assert env.tls.verify is False and env.tls.server_name is None
    # Written relative to the working directory instead, the file is not found, and the
    # message says where it was looked for.
    path = write_config(folder / "envs.yaml", [{**TLS_ENV, "tls": {"ca_file": "conf/ca.pem"}}])
    assert f"no such file: {folder / 'conf' / 'ca.pem'}" in _error(path)


def test_notify_and_lake_settings(tmp_path):
    """The optional top-level keys: a lake URL, and a notification block for chosen verdicts."""
    import yaml

    path = tmp_path / "envs.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "environments": [GOOD],
                "lake": "s3://bucket/prefix",
                "notify": {"block": "slack-webhook/ops", "verdicts": ["regression", "unconfirmed"]},
            }
        )
    )
    config = load_config(path)
    assert config.lake == "s3://bucket/prefix"
    assert config.notify.verdicts == ["regression", "unconfirmed"]
    path.write_text(
        yaml.safe_dump(
            {
                "environments": [GOOD],
                "notify": {"block": "slack-webhook/ops", "verdicts": ["regresion"]},
            }
        )
    )
    assert "notify.verdicts" in _error(path) and "'regression'" in _error(path)


def test_a_file_is_parsed_once_per_content_and_again_once_edited(tmp_path, monkeypatch):
    """The CLI, the targets and the flows share one parse; an edited file is read anew."""
    import yardstick.settings.config as config

    path = write_config(tmp_path / "environments.yaml", [GOOD])
    parses: list[Path] = []
    real_parse = config._parse
    monkeypatch.setattr(config, "_parse", lambda p, d: parses.append(p) or real_parse(p, d))
    first = load_config(path)
    assert load_config(str(path)) is first
    assert len(parses) == 1
    write_config(path, [{**GOOD, "name": "b"}])  # same size, same second: the bytes differ
    assert [e.name for e in load_config(path).environments] == ["b"]
    assert len(parses) == 2
    path.write_text("environments: [")  # a broken edit is reported, never answered from memory
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_rebaseline_entries_are_checked_and_land_with_a_run(tmp_path):
    """`rebaseline:` names an environment of the file, a figure, who and why; a run lands
    its environments' entries in the lake (who, when, why), not the others'."""
    import yaml

    from yardstick.flows.landing import land_rebaselines
    from yardstick.storage import delta
    from yardstick.storage.lakefs import Lake

    entry = {"env": "a", "figure": "pipeline_speedup", "declared": "2026-02-14",
             "by": "ops", "why": "pipelining off by design"}  # fmt: skip
    path = tmp_path / "envs.yaml"
    path.write_text(yaml.safe_dump({"environments": [GOOD], "rebaseline": [{**entry, "env": "b"}]}))
    assert "field 'rebaseline.0.env': names no environment ('b')" in _error(path)
    path.write_text(yaml.safe_dump({"environments": [GOOD], "rebaseline": [{**entry, "why": ""}]}))
    assert "rebaseline.0.why" in _error(path)
    path.write_text(yaml.safe_dump({"environments": [GOOD], "rebaseline": [entry]}))
    config = load_config(path)
    lake = Lake.at(tmp_path / "lake")
    run_id = delta.new_run_id()
    assert land_rebaselines(str(path), [], run_id, lake) == 0  # not this run's environment
    assert land_rebaselines(str(path), config.environments, run_id, lake) == 1
    (row,) = delta.read(lake, "rebaselines").to_pylist()
    assert (row["env"], row["figure"], row["subject"], row["declared_by"], row["why"]) == (
        "a",
        "pipeline_speedup",
        None,
        "ops",
        "pipelining off by design",
    )
    assert str(row["declared"]) == "2026-02-14" and row["run_id"] == run_id


@pytest.mark.parametrize("url", ["ftp://bucket/lake", "gs://bucket/lake", "s3://key:secret@b/lake"])
def test_a_lake_url_of_another_scheme_is_refused_at_load_naming_the_field(tmp_path, url):
    """`lake:` is a local folder or s3://bucket/prefix (any case): anything else is one line
    naming the field, before a run lands its files in a folder named like the URL."""
    import yaml
    from typer.testing import CliRunner

    from yardstick.app.cli import app

    path = tmp_path / "envs.yaml"
    path.write_text(yaml.safe_dump({"environments": [GOOD], "lake": url}))
    said = _error(path)
    assert "field 'lake'" in said and "secret" not in said
    path.write_text(yaml.safe_dump({"environments": [GOOD], "lake": "S3://bucket/lake"}))
    assert load_config(path).lake == "S3://bucket/lake"
    # The command line's --lake, the same rule, one line, nothing created.
    result = CliRunner().invoke(app, ["run", "--lake", url, "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and "secret" not in result.output
    assert "scheme is not supported" in result.output or "credentials" in result.output
    assert not (tmp_path / "s").exists() and not list(tmp_path.glob("*:*"))


SENTINEL = {"master": "m", "nodes": ["127.0.0.1:26379"]}
REBASE = {"env": "a", "figure": "f", "declared": "2026-01-01", "by": "me", "why": "moved"}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        # One per error path of the file's checks: each names the field to fix.
        ({"environments": []}, "environments"),
        ({"environments": {"a": 1}}, "environments"),
        ({"environments": [GOOD], "colour": 1}, "colour"),
        ({"environments": ["a"]}, "(the entry)"),
        ({"environments": [{**GOOD, "url": "redis://:pw@h:1/0"}]}, "url"),
        ({"environments": [{**GOOD, "url": "redis:///0"}]}, "url"),
        ({"environments": [{**GOOD, "url": "rediss://h:1/0?ssl_cert_reqs=none"}]}, "url"),
        ({"environments": [{**GOOD, "tls": {"verify": False}}]}, "tls"),
        (
            {"environments": [{**GOOD, "url": "rediss://h:1/0", "tls": {"ca_file": "x.pem"}}]},
            "tls.ca_file",
        ),
        (
            {
                "environments": [
                    {**GOOD, "url": "rediss://h:1/0", "tls": {"cert_file": "/etc/hostname"}}
                ]
            },
            "tls.key_file",
        ),
        (
            {
                "environments": [
                    {**GOOD, "url": "rediss://h:1/0", "tls": {"key_file": "/etc/hostname"}}
                ]
            },
            "tls.cert_file",
        ),
        ({"environments": [{**GOOD, "member_of": "x"}]}, "member_of"),
        ({"environments": [{**GOOD, "seeds": ["nohost"]}]}, "seeds"),
        ({"environments": [{**GOOD, "experiment_node": "x"}]}, "experiment_node"),
        ({"environments": [{**GOOD, "host_id": "a b"}]}, "host_id"),
        ({"environments": [{**GOOD, "discover": "maybe"}]}, "discover"),
        ({"environments": [{**GOOD, "families": "throughput"}]}, "families"),
        (
            {"environments": [{**GOOD, "family_timeouts_s": {"throughput": "x"}}]},
            "family_timeouts_s.throughput",
        ),
        (
            {"environments": [{**GOOD, "family_timeouts_s": {"throughput": 0}}]},
            "family_timeouts_s.throughput",
        ),
        # YAML's .inf and .nan: a family never bounded, or never started.
        (
            {"environments": [{**GOOD, "family_timeouts_s": {"throughput": float("inf")}}]},
            "family_timeouts_s.throughput",
        ),
        (
            {"environments": [{**GOOD, "family_timeouts_s": {"memory": float("nan")}}]},
            "family_timeouts_s.memory",
        ),
        # A Sentinel master: its URL may be left out, so a bad sentinel block is what is named
        # (it once said field 'url': required field is missing) ...
        (
            {
                "environments": [
                    {"name": "a", "mode": "scratch", "sentinel": {**SENTINEL, "nodes": []}}
                ]
            },
            "sentinel.nodes",
        ),
        ({"environments": [{"name": "a", "mode": "scratch", "sentinel": "m"}]}, "sentinel"),
        (
            {
                "environments": [
                    {"name": "a", "mode": "scratch", "sentinel": {**SENTINEL, "nodes": ["h"]}}
                ]
            },
            "sentinel.nodes",
        ),
        (
            {"environments": [{"name": "a", "mode": "scratch", "sentinel": {"nodes": ["h:1"]}}]},
            "sentinel.master",
        ),
        (
            {
                "environments": [
                    {"name": "a", "mode": "scratch", "sentinel": SENTINEL, "seeds": ["h:2"]}
                ]
            },
            "seeds",
        ),
        # ... and TLS without a URL needs the URL written (it once named tls, "this one is
        # redis://" of a URL the file never gave).
        (
            {
                "environments": [
                    {"name": "a", "mode": "scratch", "sentinel": SENTINEL, "tls": {"verify": False}}
                ]
            },
            "url",
        ),
        ({"environments": [GOOD], "rebaseline": [{**REBASE, "env": "zz"}]}, "rebaseline.0.env"),
        (
            {"environments": [GOOD], "rebaseline": [{**REBASE, "figure": "F F"}]},
            "rebaseline.0.figure",
        ),
        (
            {"environments": [GOOD], "rebaseline": [{**REBASE, "declared": "soon"}]},
            "rebaseline.0.declared",
        ),
        ({"environments": [GOOD], "lake": "ftp://x/y"}, "lake"),
        ({"environments": [GOOD], "notify": {"block": "nope"}}, "notify.block"),
        (
            {"environments": [GOOD], "notify": {"block": "a/b", "verdicts": ["bad"]}},
            "notify.verdicts.0",
        ),
    ],
)
def test_every_config_error_names_the_field_to_fix(tmp_path, data, field):
    import yaml

    path = tmp_path / "envs.yaml"
    path.write_text(yaml.safe_dump(data))
    text = _error(path)
    named = re.search(r"field '([^']*)'", text)
    assert named and named.group(1) == field, text


def test_rebaseline_command_writes_the_declaration_keeping_the_file(tmp_path):
    """`yardstick rebaseline` appends an entry the file then loads, comments kept; a second
    one goes into the same list; an unknown environment is refused with the file untouched."""
    from typer.testing import CliRunner

    from yardstick.app.cli import app

    path = tmp_path / "envs.yaml"
    path.write_text(
        "# our servers\nenvironments:\n  - name: a  # the cache\n"
        "    url: redis://127.0.0.1:6390/0\n    mode: scratch\n"
    )
    runner = CliRunner()
    args = ["rebaseline", "--config", str(path), "--env", "a", "--figure", "pipeline_speedup"]
    who = ["--by", "ops@example.com", "--why", "pipelining off by design", "--declared"]
    first = runner.invoke(app, [*args, *who, "2026-02-14"])
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, [*args, "--subject", "set c1 3B", *who, "2026-02-15"])
    assert second.exit_code == 0, second.output
    text = path.read_text()
    assert "# our servers" in text and "# the cache" in text and text.count("rebaseline:") == 1
    entries = load_config(path).rebaseline
    assert [(e.env, e.figure, e.subject, str(e.declared), e.by) for e in entries] == [
        ("a", "pipeline_speedup", None, "2026-02-14", "ops@example.com"),
        ("a", "pipeline_speedup", "set c1 3B", "2026-02-15", "ops@example.com"),
    ]
    again = runner.invoke(app, [*args, *who, "2026-02-14"])
    assert again.exit_code == 2 and "already declared" in again.output
    wrong = runner.invoke(app, [*args[:4], "b", *args[5:], *who, "2026-02-16"])
    assert wrong.exit_code == 2 and "names no environment ('b')" in wrong.output, wrong.output
    assert str(path) in wrong.output and path.read_text() == text
