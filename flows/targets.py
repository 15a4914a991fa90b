"""Which environments a run measures: the configured ones, or an embedded scratch Redis."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from difflib import get_close_matches

from yardstick.config import ConfigError, Environment, load_config
from yardstick.embedded import RedisProcess

EMBEDDED_NAME = "embedded"


def select(envs: list[Environment], names: list[str] | None, source: str) -> list[Environment]:
    """Keep the environments named in `names` (all when None); unknown names are an error."""
    if not names:
        return envs
    known = {env.name: env for env in envs}
    for name in names:
        if name not in known:
            close = get_close_matches(name, known, n=3) or sorted(known)
            raise ConfigError(f"{source}: no environment {name!r} (known: {', '.join(close)})")
    return [known[name] for name in names]


@contextmanager
def environments(
    config_path: str | None, env_names: list[str] | None
) -> Iterator[tuple[list[Environment], dict[str, str] | None]]:
    """Yield (environments, embedded server facts); an embedded server lives for the block."""
    if config_path:
        config = load_config(config_path)
        yield select(config.environments, env_names, config_path), None
        return
    with RedisProcess() as server:
        env = Environment(name=EMBEDDED_NAME, url=server.url, mode="scratch", prober_on_host=True)
        facts = {
            "path": server.binary.path,
            "version": server.binary.version_text,
            "source": server.binary.source,
        }
        yield select([env], env_names, "embedded default"), facts
