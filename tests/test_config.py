"""A bad environments file stops everything with one line naming file, environment and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_config

from yardstick.config import ConfigError, load_config

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
        ([{**GOOD, "mode": "readonly"}], "'a'", "mode", "read-only"),
        ([{**GOOD, "name": "prod/cache 1"}], "'prod/cache 1'", "name", "not allowed"),
        ([{**GOOD, "name": "-leading"}], "'-leading'", "name", "not allowed"),
        ([{**GOOD, "password_env": "MY-PASSWORD"}], "'a'", "password_env", "not allowed"),
        ([{"name": "a", "mode": "scratch"}], "'a'", "url", "missing"),
        ([GOOD, {"url": "redis://127.0.0.1:1/0", "mode": "scratch"}], "#2", "name", "missing"),
    ],
)
def test_bad_environment_names_file_environment_and_field(tmp_path, envs, env_label, field, says):
    path = write_config(tmp_path / "envs.yaml", envs)
    text = _error(path)
    assert f"environment {env_label}" in text
    assert f"field '{field}'" in text
    assert says in text


def test_url_with_inline_password_is_refused_without_echoing_it(tmp_path):
    for url in ("redis://:hunter2-secret@127.0.0.1:6390/0", "rediss://bob:hunter2-secret@h:1/0"):
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
