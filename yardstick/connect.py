"""Open named redis-py clients for an environment: password from its variable, guard when
read-only."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import redis

from yardstick import CLIENT_NAME_PREFIX
from yardstick.config import Environment
from yardstick.guard import ReadOnlyConnection, ReadOnlySSLConnection

CONNECT_TIMEOUT_S = 3.0
COMMAND_TIMEOUT_S = 10.0


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
    }
    url = env.url
    if db is not None:  # a dedicated database (benchmarks) instead of the URL's
        # from_url lets the URL's path win over a db= keyword, so rewrite the path.
        url = urlunsplit(urlsplit(url)._replace(path=f"/{db}"))
    if env.mode == "read-only":
        options["connection_class"] = ReadOnlySSLConnection if env.uses_tls else ReadOnlyConnection
    client = redis.Redis.from_url(url, **options)
    # INFO comes back as text so that one parser (yardstick.info), tested on real
    # samples, reads every INFO section the same way.
    client.set_response_callback("INFO", lambda response, **_: response)
    return client
