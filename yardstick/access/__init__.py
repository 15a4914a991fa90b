"""Redis access: connecting to an environment, the read-only guard, RESP on a raw socket, the
PING probe, INFO/SLOWLOG/LATENCY parsing, the key-space scan, scratch fixtures.

The lowest layer: it imports nothing else of the tool (see yardstick/__init__.py)."""
