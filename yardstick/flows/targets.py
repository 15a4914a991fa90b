"""Which environments a run measures: the configured ones, or an embedded scratch Redis."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from yardstick.host.embedded import RedisProcess
from yardstick.host.forwarder import Forwarder, socat_path
from yardstick.settings.config import Environment, load_config

# Re-exported: the checks live where the CLI reaches them without importing the flows.
from yardstick.settings.selection import (  # noqa: F401
    EMBEDDED_NAME,
    FORWARDED_NAME,
    check_secrets,
    missing_secrets,
    select,
    sites_of,
)


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
