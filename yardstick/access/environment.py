"""One Redis environment as configured: its URL, mode, TLS files and where it is measured from."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

Mode = Literal["scratch", "read-only"]
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
# Report file names the run writes beside <env>.md: an environment so named would be overwritten.
RESERVED_NAMES = {"index", "comparison"}


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
