"""The environments file: which Redis servers to measure, validated before anything runs."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

Mode = Literal["scratch", "read-only"]
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
# Report file names the run writes beside <env>.md: an environment so named would be overwritten.
RESERVED_NAMES = {"index", "comparison"}


class ConfigError(Exception):
    """A configuration problem, worded as one line naming file, environment and field."""


class TlsSettings(BaseModel):
    """TLS of one environment: files the prober reads, never copied anywhere."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca_file: Path | None = None  # CA bundle the server's certificate must chain to
    cert_file: Path | None = None  # client certificate (mutual TLS), with key_file
    key_file: Path | None = None
    server_name: str | None = None  # SNI and the name checked, when not the URL's host
    verify: bool = True  # false: encrypt but accept any certificate (say so in the report)

    @field_validator("ca_file", "cert_file", "key_file")
    @classmethod
    def _check_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        """The file must exist now, not at 3 a.m.: a relative path is taken from the
        environments file's folder (load_config passes it), else the working directory."""
        if value is None:
            return None
        value = value.expanduser()
        base = (info.context or {}).get("base_dir")
        if not value.is_absolute() and base is not None:
            value = Path(base) / value
        if not value.is_file():
            raise ValueError(f"no such file: {value}")
        if not os.access(value, os.R_OK):
            raise ValueError(f"cannot be read: {value}")
        return value


# The site of environments that name none: measured by the flow run that reads the config.
LOCAL_SITE = "local"


class Environment(BaseModel):
    """One Redis server to measure, and what the tool may do to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Used in lake paths (env=<name>) and file names, hence the narrow alphabet.
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    url: str
    mode: Mode
    password_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    transport: str | None = None
    same_server_as: str | None = None
    # None means "decide from the URL": a loopback host puts the prober on the server host.
    prober_on_host: bool | None = None
    # Only these measurement families (default: every family that applies to the mode).
    # Checked against the plan when the run starts (flows/plan.check_families).
    families: list[str] | None = None
    # TLS files and checks; only with a rediss:// URL (validated in ConfigFile checks).
    tls: TlsSettings | None = None
    # The machine the server runs on, named by the operator: environments with one host_id
    # are measured one at a time across runs, probers and Prefect servers. Without it the
    # lock is the server process itself (INFO server run_id).
    host_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    # Wall-clock bound per family, overriding the profile's family_timeout_s.
    family_timeouts_s: dict[str, float] | None = None
    # Where the prober must sit to measure this server (a network, a region, a laptop). The
    # nightly run measures `local` environments itself and sends every other site's to that
    # site's Prefect work queue (a worker inside that network): README "Many sites".
    site: str = Field(default=LOCAL_SITE, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if name.lower() in RESERVED_NAMES:
            raise ValueError(
                f"{name!r} is reserved: its report would be overwritten by {name.lower()}.md"
            )
        return name

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError("must start with redis:// or rediss://")
        if not parts.hostname:
            raise ValueError("has no host")
        try:
            _ = parts.port  # urlsplit checks the port only when asked
        except ValueError:
            raise ValueError("has an invalid port") from None
        # redis-py also authenticates with ?password=... in the query string.
        in_query = any(
            key.lower() == "password" for key, _ in parse_qsl(parts.query, keep_blank_values=True)
        )
        if parts.password or in_query:
            # Secrets never sit in the config file, so they can never be copied from it.
            raise ValueError(
                "holds a password: put it in an environment variable named by password_env"
            )
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            raise ValueError(f"database {db!r} is not a number")
        return url

    @property
    def host(self) -> str:
        """Host name or address of the server, as written in the URL."""
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        """TCP port of the server."""
        return urlsplit(self.url).port or 6379

    @property
    def db(self) -> int:
        """Database number from the URL path (0 when absent)."""
        db = urlsplit(self.url).path.lstrip("/")
        return int(db) if db else 0

    @property
    def uses_tls(self) -> bool:
        """Whether the connection uses TLS (rediss://)."""
        return urlsplit(self.url).scheme == "rediss"

    @property
    def is_loopback(self) -> bool:
        """Whether the URL points at this machine."""
        host = self.host.lower()
        if host in LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @property
    def transport_label(self) -> str:
        """Declared transport, or 'tls'/'direct' read from the URL."""
        return self.transport or ("tls" if self.uses_tls else "direct")

    @property
    def on_server_host(self) -> bool:
        """Whether the prober runs on the server's host (host-local measurements allowed)."""
        if self.prober_on_host is not None:
            return self.prober_on_host
        return self.is_loopback and self.transport_label == "direct"

    @property
    def url_redacted(self) -> str:
        """The URL without any credentials: safe for Parquet, reports and logs."""
        parts = urlsplit(self.url)
        user = f"{parts.username}@" if parts.username else ""
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        return f"{parts.scheme}://{user}{host}:{self.port}/{self.db}"


VERDICTS = (
    "regression",
    "environment changed",
    "unconfirmed",
    "improvement",
    "steady",
    "not judged",
)


class NotifySettings(BaseModel):
    """Who hears of tonight's verdict without a Prefect automation: a notification block."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A saved Prefect notification block, `<block type slug>/<name>` as `prefect block ls`
    # shows it (slack-webhook/…, custom-webhook/…, email…): its URL or token stays in Prefect.
    block: str = Field(pattern=r"^[a-z0-9-]+/[A-Za-z0-9_.-]+$")
    # The environments' overall verdicts that send a message (not `on:`: YAML reads it as true).
    verdicts: list[Literal[VERDICTS]] = ["regression"]  # type: ignore[valid-type]


class ConfigFile(BaseModel):
    """The whole environments file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environments: list[Environment] = Field(min_length=1)
    # Where every site lands its files: a local folder, a folder every site can reach, or
    # s3://bucket/prefix (endpoint and credentials from the AWS_* environment variables of
    # each machine, never from this file). The nightly/collect `lake_dir` parameter wins.
    lake: str | None = None
    # Optional: a message per environment whose verdict is in `on` (README: Tonight's verdict).
    notify: NotifySettings | None = None

    @model_validator(mode="after")
    def _check_references(self) -> ConfigFile:
        seen: set[str] = set()
        for index, env in enumerate(self.environments):
            if env.name in seen:
                raise _EnvFieldError(index, "name", f"duplicate name {env.name!r}")
            seen.add(env.name)
        for index, env in enumerate(self.environments):
            if env.same_server_as is None:
                continue
            if env.same_server_as == env.name:
                raise _EnvFieldError(index, "same_server_as", "names the environment itself")
            if env.same_server_as not in seen:
                raise _EnvFieldError(
                    index, "same_server_as", f"names no environment ({env.same_server_as!r})"
                )
            partner = next(e for e in self.environments if e.name == env.same_server_as)
            if partner.site != env.site:
                # The pair is measured in one flow run, by one prober.
                raise _EnvFieldError(
                    index,
                    "same_server_as",
                    f"names {partner.name!r} of site {partner.site!r}, not this site {env.site!r}",
                )
        for index, env in enumerate(self.environments):
            _check_tls(index, env)
        return self


def _check_tls(index: int, env: Environment) -> None:
    """TLS settings that cannot work: raise _EnvFieldError at the field to fix."""
    # redis-py would take ?ssl_...= options from the URL (over the keywords built from
    # `tls:`), the C tools would not: TLS is configured in one place only.
    in_query = sorted(
        {key for key, _ in parse_qsl(urlsplit(env.url).query) if key.lower().startswith("ssl")}
    )
    if in_query:
        raise _EnvFieldError(
            index, "url", f"has TLS options ({', '.join(in_query)}): write them under tls:"
        )
    if env.tls is None:
        return
    if not env.uses_tls:
        raise _EnvFieldError(
            index, "tls", "needs a rediss:// URL (this one is redis://, without TLS)"
        )
    if env.tls.cert_file is not None and env.tls.key_file is None:
        raise _EnvFieldError(index, "tls.key_file", "missing: cert_file needs its key_file")
    if env.tls.key_file is not None and env.tls.cert_file is None:
        raise _EnvFieldError(index, "tls.cert_file", "missing: key_file needs its cert_file")


class _EnvFieldError(ValueError):
    """A cross-field problem located at one environment's field."""

    def __init__(self, index: int, field: str, message: str) -> None:
        super().__init__(message)
        self.index, self.field, self.message = index, field, message


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice is an error instead of "last one wins"
    (a second `mode:` line must not silently turn a read-only environment into scratch)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # Only keys written in this mapping: a key overriding one merged in by `<<:` is fine.
        seen: set[tuple[str, str]] = set()
        for key_node, _value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            if (key_node.tag, key_node.value) in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                )
            seen.add((key_node.tag, key_node.value))
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | Path) -> ConfigFile:
    """Read and validate an environments file, or raise ConfigError with one line."""
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with an 'environments' list")
    try:
        # Relative TLS file paths are taken from the environments file's folder.
        return ConfigFile.model_validate(raw, context={"base_dir": path.absolute().parent})
    except ValidationError as exc:
        raise ConfigError(_describe(path, raw, exc)) from None


def _env_label(raw: dict[str, Any], index: int) -> str:
    """Name an environment by its `name` when it has one, else by its position."""
    envs = raw.get("environments")
    if isinstance(envs, list) and index < len(envs) and isinstance(envs[index], dict):
        name = envs[index].get("name")
        if isinstance(name, str) and name:
            return f"environment {name!r}"
    return f"environment #{index + 1}"


def _describe(path: Path, raw: dict[str, Any], exc: ValidationError) -> str:
    """Turn pydantic's report into one line: file, environment, field, problem."""
    errors = exc.errors()
    first = errors[0]
    loc = list(first["loc"])
    ctx_error = (first.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _EnvFieldError):
        where = f"{_env_label(raw, ctx_error.index)}, field {ctx_error.field!r}"
        message = ctx_error.message
    else:
        message = _wording(first)
        if len(loc) >= 2 and loc[0] == "environments" and isinstance(loc[1], int):
            field = ".".join(str(p) for p in loc[2:]) or "(the entry)"
            where = f"{_env_label(raw, loc[1])}, field {field!r}"
        else:
            where = f"field {'.'.join(str(p) for p in loc) or '(top level)'!r}"
    more = (
        f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        if len(errors) > 1
        else ""
    )
    return f"{path}: {where}: {message}{more}"


def _wording(error: dict[str, Any]) -> str:
    """Plain wording for the pydantic error kinds users meet most."""
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"must be one of {error['ctx']['expected']} (got {error['input']!r})"
    if kind == "string_pattern_mismatch":
        return f"{error['input']!r} has characters not allowed here"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")
