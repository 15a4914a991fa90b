"""Which environments a run measures: the configured ones, or an embedded scratch Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from difflib import get_close_matches

from yardstick.flows.plan import check_families
from yardstick.host.embedded import RedisProcess
from yardstick.host.forwarder import Forwarder, socat_path
from yardstick.settings.config import LOCAL_SITE, ConfigError, Environment, load_config

EMBEDDED_NAME = "embedded"
FORWARDED_NAME = "embedded-forwarded"


def select(envs: list[Environment], names: list[str] | None, source: str) -> list[Environment]:
    """Keep the environments named in `names` (all when None); unknown names are an error."""
    check_families(envs, source)
    if not names:
        return envs
    known = {env.name: env for env in envs}
    for name in names:
        if name not in known:
            close = get_close_matches(name, known, n=3) or sorted(known)
            raise ConfigError(f"{source}: no environment {name!r} (known: {', '.join(close)})")
    return [known[name] for name in names]


def missing_secrets(envs: list[Environment]) -> list[str]:
    """Each password variable these environments name (password_env, sentinel.password_env)
    that is not set, each as "environment 'x', field 'f': variable V is not set"."""
    missing: list[str] = []
    for env in envs:
        wanted = [("password_env", env.password_env)]
        if env.sentinel is not None:
            wanted.append(("sentinel.password_env", env.sentinel.password_env))
        for field, variable in wanted:
            if variable and os.environ.get(variable) is None:
                missing.append(
                    f"environment {env.name!r}, field {field!r}: variable {variable} is not set"
                )
    return missing


def check_secrets(envs: list[Environment], source: str) -> None:
    """Before any server is contacted: every password variable of the environments this
    process measures is set, else one ConfigError line naming each one missing. Only this
    process's environments: another site's are checked by that site's own run, where its
    variables live."""
    missing = missing_secrets(envs)
    if missing:
        raise ConfigError(f"{source}: " + "; ".join(missing))


def sites_of(envs: list[Environment]) -> dict[str, list[Environment]]:
    """Environments by site, the local site first."""
    by_site: dict[str, list[Environment]] = {}
    for env in sorted(envs, key=lambda e: e.site != LOCAL_SITE):
        by_site.setdefault(env.site, []).append(env)
    return by_site


def configured_lake(config_path: str | None) -> str | None:
    """The environments file's `lake:` (None without a file or without the key)."""
    return load_config(config_path).lake if config_path else None


def configured_notify(config_path: str | None) -> dict | None:
    """The environments file's `notify:` as a plain dict (None without one)."""
    notify = load_config(config_path).notify if config_path else None
    return notify.model_dump() if notify else None


@contextmanager
def environments(
    config_path: str | None, env_names: list[str] | None
) -> Iterator[tuple[list[Environment], dict[str, str] | None]]:
    """Yield (environments, embedded server facts); an embedded server lives for the block."""
    if config_path:
        config = load_config(config_path)
        yield select(config.environments, env_names, config_path), None
        return
    with ExitStack() as stack:
        server = stack.enter_context(RedisProcess())
        envs = [
            Environment(name=EMBEDDED_NAME, url=server.url, mode="scratch", prober_on_host=True)
        ]
        if socat_path():
            # A forwarded twin of the same server, so a newcomer sees what a forwarded path
            # (Docker's port forwarding, a proxy) costs. It runs only the families that
            # compare paths; the rest would repeat what the direct one measured.
            forwarder = stack.enter_context(Forwarder(server.port))
            envs.append(
                Environment(
                    name=FORWARDED_NAME,
                    url=forwarder.url,
                    mode="scratch",
                    transport="port-forwarded (socat)",
                    same_server_as=EMBEDDED_NAME,
                    prober_on_host=True,
                    families=["fingerprint", "round_trip", "transport"],
                )
            )
        facts = {
            "path": server.binary.path,
            "version": server.binary.version_text,
            "source": server.binary.source,
        }
        yield select(envs, env_names, "embedded default"), facts
