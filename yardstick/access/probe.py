"""The lean PING probe: pre-encoded PINGs on a raw socket, each reply timed, and the
log-bucketed histogram its RTTs land in (round trip, contention and transport use it)."""

from __future__ import annotations

import math
import socket
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from yardstick import interrupt
from yardstick.access.rawsock import dedicated_connection, raw_socket

# Pre-encoded request: encoding PING per sample would be measured as latency.
PING_REQUEST = b"*1\r\n$4\r\nPING\r\n"
PONG_REPLY = b"+PONG\r\n"
# Bucket edges grow by 2 %: any percentile read from the histogram is within 2 %.
BUCKET_GROWTH = 1.02
_LOG_GROWTH = math.log(BUCKET_GROWTH)
MIN_RTT_US = 0.01


class ProbeError(Exception):
    """The server answered a PING with something other than PONG."""


def bucket_of(rtt_us: float) -> int:
    """Histogram bucket index of one RTT."""
    return math.floor(math.log(max(rtt_us, MIN_RTT_US)) / _LOG_GROWTH)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """Lower and upper edge (µs) of a bucket."""
    return BUCKET_GROWTH**bucket, BUCKET_GROWTH ** (bucket + 1)


def probe_window(sock, window_s: float, interval_s: float) -> array:
    """Send PING and time each reply until `window_s` has passed; RTTs in µs."""
    interrupt.check()  # once a window: a stop request waits at most one window
    rtts_us = array("d")
    deadline_ns = time.perf_counter_ns() + int(window_s * 1e9)
    while True:
        start_ns = time.perf_counter_ns()
        sock.sendall(PING_REQUEST)
        reply = sock.recv(64)
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(64)
            if not chunk:
                raise ProbeError("connection closed during PING")
            reply += chunk
        end_ns = time.perf_counter_ns()
        if reply != PONG_REPLY:
            raise ProbeError(f"PING answered {reply[:60]!r}")
        rtts_us.append((end_ns - start_ns) / 1000)
        if end_ns >= deadline_ns:
            return rtts_us
        if interval_s > 0:
            time.sleep(interval_s)


@contextmanager
def probe_socket(client: redis.Redis) -> Iterator[socket.socket]:
    """A dedicated connection from the client's pool (see rawsock), as a raw socket for the
    lean probe's pre-encoded PINGs; closed, not pooled, if the probe fails (a PONG unread)."""
    with dedicated_connection(client) as conn:
        yield raw_socket(conn)
