"""One Redis environment as configured: its URL, mode, TLS files and where it is measured from."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

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


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 as `[::1]:6379`) as (host, port); ValueError names what is wrong."""
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)


def format_address(host: str, port: int) -> str:
    """(host, port) as `host:port`, IPv6 hosts bracketed."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class SentinelSettings(BaseModel):
    """A master managed by Sentinel: asked for its current address at every run and collection."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The master's name as the Sentinels know it (`sentinel monitor <name> ...`).
    master: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    # The Sentinels, `host:port` each; the first that answers is asked.
    nodes: list[str] = Field(min_length=1)
    # The Sentinels' own credentials (sentinel.conf `requirepass`/ACL), apart from the data
    # servers' (the environment's password_env).
    username: str | None = None
    password_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("nodes")
    @classmethod
    def _check_nodes(cls, nodes: list[str]) -> list[str]:
        for node in nodes:
            parse_address(node)
        return nodes


# A Sentinel environment's URL when the file gives none and no node to borrow a host from.
SENTINEL_PLACEHOLDER_URL = "redis://sentinel-master.invalid/0"

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
    # Checked against the plan when the run starts (yardstick/flows/plan.check_families).
    families: list[str] | None = None
    # TLS files and checks; only with a rediss:// URL (validated in ConfigFile checks).
    tls: TlsSettings | None = None
    # The machine the server runs on, named by the operator: environments with one host_id
    # are measured one at a time across runs, probers and Prefect servers. Without it the
    # lock is the server process itself (INFO server run_id).
    host_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    # Wall-clock bound per family, overriding the profile's family_timeout_s: finite and
    # above 0 (YAML's .inf or .nan would make a family unbounded, or never start).
    family_timeouts_s: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] | None = None
    # Where the prober must sit to measure this server (a network, a region, a laptop). The
    # nightly run measures `local` environments itself and sends every other site's to that
    # site's Prefect work queue (a worker inside that network): docs/sites.md.
    site: str = Field(default=LOCAL_SITE, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    # A Sentinel-managed master: the URL then gives only scheme, user and database (its host
    # and port are the master's, asked of the Sentinels); without a URL, redis://.../0.
    sentinel: SentinelSettings | None = None
    # More nodes of the same cluster (`host:port`), tried when the URL's node does not answer.
    seeds: list[str] | None = None
    # Measure the other servers of the shape too: every node of a cluster, the replicas of a
    # primary (standalone or Sentinel's). false: only the server the URL (or Sentinel) names.
    discover: bool = True
    # The cluster primary (`host:port`) whose slots the experiments' keys live on (default:
    # the URL's node when it is a primary, else the first primary by address).
    experiment_node: str | None = None
    # A replica this far behind its primary is flagged (first screen, index, an event).
    # 10 MB: ten times the default repl-backlog-size, so a replica that far behind cannot
    # resynchronise partially after a dropped link, while a burst of bulk writes stays under
    # it. 30 s without an acknowledgement: replicas ACK every second, so that is 30 missed,
    # half the default repl-timeout (60 s) after which the primary drops the link.
    replica_lag_max_bytes: int = Field(default=10_000_000, gt=0)
    replica_lag_max_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)

    # Set by the tool when it splits an environment into the servers it is made of
    # (yardstick/flows/units.py), never by the environments file (ConfigFile refuses them):
    # the configured environment a node belongs to,
    member_of: str | None = None
    # the node's role (primary | replica) and whether the environment is a Redis Cluster,
    node_role: str | None = None
    cluster: bool = False
    # the hash tag ("{yst12}") that routes the tool's own keys to this primary's slots,
    key_tag: str | None = None
    # and whether the experiments run on this node (one primary per cluster).
    runs_experiments: bool = True

    @model_validator(mode="before")
    @classmethod
    def _sentinel_url(cls, data: object) -> object:
        """A Sentinel environment may leave out the URL: the master's address is asked."""
        if isinstance(data, dict) and data.get("url") is None and data.get("sentinel"):
            nodes = (
                (data["sentinel"] or {}).get("nodes")
                if isinstance(data["sentinel"], dict)
                else None
            )
            if nodes and isinstance(nodes[0], str):
                # A placeholder host until the Sentinels are asked (yardstick/flows/units.py).
                return {**data, "url": f"redis://{nodes[0].strip()}/0"}
            # No usable node: a placeholder all the same, so that the error reported is the
            # sentinel block's own, not a missing url the file need not give.
            return {**data, "url": SENTINEL_PLACEHOLDER_URL}
        return data

    @property
    def url_given(self) -> bool:
        """Whether the URL is the file's, not the placeholder of a Sentinel master's."""
        if self.sentinel is None:
            return True
        placeholders = {SENTINEL_PLACEHOLDER_URL, f"redis://{self.sentinel.nodes[0].strip()}/0"}
        return self.url not in placeholders

    @field_validator("seeds")
    @classmethod
    def _check_seeds(cls, seeds: list[str] | None) -> list[str] | None:
        for seed in seeds or []:
            parse_address(seed)
        return seeds

    @field_validator("experiment_node")
    @classmethod
    def _check_experiment_node(cls, node: str | None) -> str | None:
        if node is not None:
            parse_address(node)
        return node

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
    def address(self) -> str:
        """`host:port` of the server the URL names."""
        return format_address(self.host, self.port)

    @property
    def url_redacted(self) -> str:
        """The URL without any credentials: safe for Parquet, reports and logs."""
        parts = urlsplit(self.url)
        user = f"{parts.username}@" if parts.username else ""
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        return f"{parts.scheme}://{user}{host}:{self.port}/{self.db}"
