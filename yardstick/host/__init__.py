"""The host the tool runs on: embedded servers, the TCP forwarder, the wrapped C tools, host
CPU load, and stopping (signals, timeouts).

Imports Redis access only (see yardstick/__init__.py)."""
