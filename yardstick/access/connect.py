"""Open named redis-py clients for an environment: password from its variable, guard when
read-only."""

from __future__ import annotations

import inspect
import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.connection import SSLConnection

from yardstick import CLIENT_NAME_PREFIX
from yardstick.access.environment import Environment
from yardstick.access.guard import ReadOnlyConnection, ReadOnlySSLConnection

CONNECT_TIMEOUT_S = 3.0
COMMAND_TIMEOUT_S = 10.0


# redis-py 7.1+ takes driver_info (lib_name/lib_version deprecated); older ones the pair.
NO_SETINFO: dict[str, None] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.connection.AbstractConnection.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)


class MissingSecret(Exception):
    """The environment variable that should hold a password is not set."""


def client_name(role: str) -> str:
    """The CLIENT SETNAME value for a connection doing `role` (e.g. 'roundtrip')."""
    return f"{CLIENT_NAME_PREFIX}-{role}"


def password_for(env: Environment) -> str | None:
    """Read the environment's password from its variable; never stored anywhere."""
    if env.password_env is None:
        return None
    value = os.environ.get(env.password_env)
    if value is None:
        raise MissingSecret(
            f"environment {env.name!r}: variable {env.password_env} (password_env) is not set"
        )
    return value


class _ServerName:
    """TLS connections that may check (and send as SNI) a name other than the URL's host.

    redis-py 8 has no option for it: SSLConnection wraps the socket with
    server_hostname=self.host. The host is swapped for the handshake only, after the TCP
    connection to the URL's host is made."""

    def __init__(self, *args: Any, ssl_server_name: str | None = None, **kwargs: Any) -> None:
        self.ssl_server_name = ssl_server_name
        super().__init__(*args, **kwargs)

    def _wrap_socket_with_ssl(self, sock: Any) -> Any:
        if not self.ssl_server_name:
            return super()._wrap_socket_with_ssl(sock)  # type: ignore[misc]
        host = self.host  # type: ignore[has-type]
        self.host = self.ssl_server_name
        try:
            return super()._wrap_socket_with_ssl(sock)  # type: ignore[misc]
        finally:
            self.host = host


class TlsConnection(_ServerName, SSLConnection):
    """redis-py's TLS connection, with `tls.server_name` as the name checked and sent."""


class ReadOnlyTlsConnection(_ServerName, ReadOnlySSLConnection):
    """The read-only guard's TLS connection, with `tls.server_name` as above."""


def tls_options(env: Environment) -> dict[str, Any]:
    """redis-py keywords from the environment's `tls:` settings (none without rediss://).

    verify: false encrypts but accepts any certificate, whoever signed it and whatever name
    it holds (ssl_cert_reqs none); the files are read by redis-py at connect time."""
    if not env.uses_tls:
        return {}
    tls = env.tls
    options: dict[str, Any] = {
        "connection_class": ReadOnlyTlsConnection if env.mode == "read-only" else TlsConnection
    }
    if tls is None:
        return options  # redis-py's defaults: the system's CAs, the URL's host checked
    options["ssl_cert_reqs"] = "required" if tls.verify else "none"
    options["ssl_check_hostname"] = tls.verify
    if tls.ca_file is not None:
        options["ssl_ca_certs"] = str(tls.ca_file)
    if tls.cert_file is not None and tls.key_file is not None:
        options["ssl_certfile"] = str(tls.cert_file)
        options["ssl_keyfile"] = str(tls.key_file)
    if tls.server_name:
        options["ssl_server_name"] = tls.server_name
    return options


def open_client(
    env: Environment,
    role: str,
    command_timeout_s: float = COMMAND_TIMEOUT_S,
    db: int | None = None,
) -> redis.Redis:
    """A decoded, named client; read-only environments get the guarded connection class."""
    options: dict = {
        "password": password_for(env),
        "client_name": client_name(role),
        "decode_responses": True,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": command_timeout_s,
        "retry_on_timeout": False,
        # RESP2 on every server: HELLO needs Redis 6, and redis-py >= 7 opens each RESP3
        # connection with CLIENT MAINT_NOTIFICATIONS, which the read-only guard refuses.
        "protocol": 2,
        # No CLIENT SETINFO on connect: before Redis 7.2 the server answers it with an error,
        # which every connection would add to a production server's errorstat_ERR.
        **NO_SETINFO,
    }
    url = env.url
    if db is not None:  # a dedicated database (benchmarks) instead of the URL's
        # from_url lets the URL's path win over a db= keyword, so rewrite the path.
        url = urlunsplit(urlsplit(url)._replace(path=f"/{db}"))
    if env.mode == "read-only":
        options["connection_class"] = ReadOnlyConnection
    options.update(tls_options(env))  # TLS: the guard's or redis-py's TLS connection class
    client = redis.Redis.from_url(url, **options)
    # INFO comes back as text so that one parser (yardstick.access.info), tested on real
    # samples, reads every INFO section the same way.
    client.set_response_callback("INFO", lambda response, **_: response)
    return client
