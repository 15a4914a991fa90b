"""The environments file: which Redis servers to measure, validated before anything runs."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from yardstick.access.environment import (  # noqa: F401  (re-exported for callers above)
    LOCAL_SITE,
    Environment,
    Mode,
    TlsSettings,
)
from yardstick.errors import ConfigError  # noqa: F401
from yardstick.storage.location import problem as location_problem

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


class Rebaseline(BaseModel):
    """A series declared the new normal: its standing change is no longer reported, and it is
    judged again once verdict_min_baseline runs of the new level are in (docs/verdict.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str = Field(min_length=1)
    figure: str = Field(pattern=r"^[a-z0-9_]+$")
    # One subject (a cell, command, prefix...) or, when left out, every subject of the figure.
    subject: str | None = None
    declared: date  # when the operator declared it (with env, figure, subject: its identity)
    by: str = Field(min_length=1)  # who
    why: str = Field(min_length=1)


class ConfigFile(BaseModel):
    """The whole environments file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environments: list[Environment] = Field(min_length=1)
    # Where every site lands its files: a local folder, a folder every site can reach, or
    # s3://bucket/prefix (endpoint and credentials from the AWS_* environment variables of
    # each machine, never from this file). The nightly/collect `lake_dir` parameter wins.
    lake: str | None = None
    # Optional: a message per environment whose verdict is in `on` (docs/verdict.md).
    notify: NotifySettings | None = None
    # Optional: series declared the new normal (landed in the lake with each run: who, why).
    rebaseline: list[Rebaseline] = []

    @field_validator("lake")
    @classmethod
    def _check_lake(cls, value: str | None) -> str | None:
        """A local folder or s3://bucket/prefix: any other scheme is refused here, before a
        run lands its files under a folder named like the URL."""
        if value is not None and (why := location_problem(value)):
            raise ValueError(why)
        return value

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
            _check_shape(index, env)
        for index, entry in enumerate(self.rebaseline):
            if entry.env not in seen:
                where = f"rebaseline.{index}.env"
                raise _FieldError(where, f"names no environment ({entry.env!r})")
        return self


# Environment fields the tool sets on the servers an environment is made of (flows/units.py).
TOOL_SET_FIELDS = ("member_of", "node_role", "cluster", "key_tag", "runs_experiments")


def _check_shape(index: int, env: Environment) -> None:
    """Shape settings that cannot work together: raise _EnvFieldError at the field to fix."""
    for name in TOOL_SET_FIELDS:
        if name in env.model_fields_set:
            raise _EnvFieldError(index, name, "set by the tool for each node, not in the file")
    if env.sentinel is not None and env.seeds:
        raise _EnvFieldError(
            index, "seeds", "cluster seed nodes, not for a Sentinel master (give sentinel.nodes)"
        )


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
    if not env.uses_tls and not env.url_given:
        # A Sentinel master's URL may be left out, but then it is redis://: the URL is the
        # field to write, not tls.
        raise _EnvFieldError(
            index,
            "url",
            "missing: tls needs a rediss:// URL (its host is the master's, asked of the Sentinels)",
        )
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


class _FieldError(ValueError):
    """A cross-field problem located at a top-level field (its dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


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


# One parse per file per process: the CLI, the targets and the flows all ask for it. Keyed by
# the file's bytes (reading is cheap, YAML and validation are not), so an edited file is
# parsed again; errors are not kept.
_PARSED: dict[tuple[str, bytes], ConfigFile] = {}


def load_config(path: str | Path) -> ConfigFile:
    """Read and validate an environments file (parsed once per content), or raise ConfigError."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:
        return _parse(path, None)  # the parse names what is wrong with it
    key = (str(path.absolute()), data)
    if key not in _PARSED:
        _PARSED[key] = _parse(path, data)
    return _PARSED[key]


def _parse(path: Path, data: bytes | None) -> ConfigFile:
    """Validate an environments file's bytes (read here when None), or raise ConfigError."""
    try:
        text = (path.read_bytes() if data is None else data).decode("utf-8")
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
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
    elif isinstance(ctx_error, _FieldError):
        where, message = f"field {ctx_error.field!r}", ctx_error.message
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
    if kind == "finite_number":
        return f"must be a finite number (got {error['input']!r})"
    if kind == "greater_than":
        bound = error["ctx"]["gt"]
        shown = f"{bound:g}" if isinstance(bound, int | float) else str(bound)
        return f"must be above {shown} (got {error['input']!r})"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")
