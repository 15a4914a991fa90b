"""Host groups: environments on one server host run one after another, other hosts in parallel."""

from __future__ import annotations

import pytest

from yardstick.flows.plan import check_families, host_group_label, host_groups
from yardstick.settings.config import ConfigError, Environment


def _env(name: str, url: str, **extra) -> Environment:
    return Environment(name=name, url=url, mode="scratch", **extra)


def _names(groups: list[list[Environment]]) -> list[list[str]]:
    return [[env.name for env in group] for group in groups]


def test_loopback_environments_share_one_group():
    envs = [
        _env("a", "redis://127.0.0.1:6390/0"),
        _env("b", "redis://localhost:6391/0"),
        _env("c", "redis://127.0.0.2:6392/0"),  # still this machine
    ]
    groups = host_groups(envs)
    assert _names(groups) == [["a", "b", "c"]]
    assert host_group_label(groups[0]) == "localhost"


def test_different_hosts_are_separate_groups_and_same_host_is_joined():
    envs = [
        _env("a1", "redis://redis-a.example:6379/0"),
        _env("b", "redis://redis-b.example:6379/0"),
        _env("a2", "redis://REDIS-A.example:6380/1"),
        _env("local", "redis://127.0.0.1:6379/0"),
    ]
    assert _names(host_groups(envs)) == [["a1", "a2"], ["b"], ["local"]]


def test_same_server_as_links_environments_across_addresses():
    envs = [
        _env("direct", "redis://redis-a.example:6379/0"),
        _env("other", "redis://redis-b.example:6379/0"),
        # A tunnel on this machine to redis-a: a different URL host, the same server.
        _env("tunnel", "redis://127.0.0.1:16379/0", transport="ssh", same_server_as="direct"),
        _env("local", "redis://127.0.0.1:6379/0"),
    ]
    groups = _names(host_groups(envs))
    # The tunnel joins redis-a, and through the tunnel's loopback host so does `local`:
    # a run on this machine perturbs what the tunnel measures.
    assert sorted(map(sorted, groups)) == [["direct", "local", "tunnel"], ["other"]]
    assert sum(len(g) for g in groups) == len(envs)


def test_same_server_as_naming_an_unselected_environment_is_ignored():
    envs = [_env("tunnel", "redis://127.0.0.1:16379/0", same_server_as="gone")]
    assert _names(host_groups(envs)) == [["tunnel"]]


def test_every_environment_is_in_exactly_one_group_in_config_order():
    envs = [_env(f"e{i}", f"redis://host{i % 3}.example:6379/0") for i in range(9)]
    groups = _names(host_groups(envs))
    flat = [name for group in groups for name in group]
    assert sorted(flat) == sorted(e.name for e in envs) and len(flat) == len(set(flat))
    assert groups == [["e0", "e3", "e6"], ["e1", "e4", "e7"], ["e2", "e5", "e8"]]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"family_timeouts_s": {"throughputt": 900}}, "no family 'throughputt'"),
    ],
)
def test_family_bounds_name_real_families(extra, says):
    env = Environment(name="a", url="redis://127.0.0.1:1/0", mode="scratch", **extra)
    with pytest.raises(ConfigError, match=says):
        check_families([env], "envs.yaml")


def test_family_bound_of_the_environment_wins_over_the_profile():
    from yardstick.flows.landing import family_timeout_s
    from yardstick.settings.profiles import get_profile

    env = Environment(
        name="a", url="redis://127.0.0.1:1/0", mode="scratch", family_timeouts_s={"throughput": 900}
    )
    assert family_timeout_s("throughput", env, get_profile("nightly")) == 900
    assert family_timeout_s("memory", env, get_profile("quick")) == 120
