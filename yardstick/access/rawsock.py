"""A connection of its own from a redis-py client's pool, whose socket then takes pre-encoded
RESP directly (the PING probe, the key-space scan)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import redis


@contextmanager
def dedicated_connection(client: redis.Redis) -> Iterator[redis.connection.AbstractConnection]:
    """A connection taken from the client's pool and connected (redis-py does AUTH, TLS, SELECT
    and CLIENT SETNAME), back to the pool after; on any error it is closed first, since its
    socket may hold replies nobody read."""
    conn = client.connection_pool.get_connection()
    try:
        conn.connect()
        yield conn
    except BaseException:
        conn.disconnect()
        raise
    finally:
        client.connection_pool.release(conn)


def raw_socket(conn: redis.connection.AbstractConnection) -> socket.socket:
    """The connected socket under a redis-py connection, for writing pre-encoded commands."""
    return conn._sock  # noqa: SLF001 - pre-encoded RESP skips redis-py's packing
