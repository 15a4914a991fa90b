"""Which configured environments a run measures, and whether it can measure them: the names
asked for, the families each environment asks for, the password variables. Checked by the CLI
before Prefect or a family is imported (flows/targets.py re-exports these for the flows)."""

from __future__ import annotations

import os
from difflib import get_close_matches

from yardstick.settings.config import LOCAL_SITE, ConfigError, Environment
from yardstick.settings.names import FAMILY_WRITES

# The environments of a run without an environments file (yardstick/flows/targets.environments).
EMBEDDED_NAME = "embedded"
FORWARDED_NAME = "embedded-forwarded"


def check_families(envs: list[Environment], source: str) -> None:
    """Refuse unknown family names, and write-load families asked of a read-only environment."""
    known = ", ".join(FAMILY_WRITES)
    for env in envs:
        for name in env.families or []:
            where = f"{source}: environment {env.name!r}, field 'families'"
            if name not in FAMILY_WRITES:
                raise ConfigError(f"{where}: no family {name!r} (known: {known})")
            if FAMILY_WRITES[name] and env.mode != "scratch":
                raise ConfigError(
                    f"{where}: {name} writes to the server; read-only environments never get it"
                )
        for name, timeout_s in (env.family_timeouts_s or {}).items():
            where = f"{source}: environment {env.name!r}, field 'family_timeouts_s'"
            if name not in FAMILY_WRITES:
                raise ConfigError(f"{where}: no family {name!r} (known: {known})")
            if not timeout_s > 0:
                raise ConfigError(f"{where}: {name} must be a positive number of seconds")


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
