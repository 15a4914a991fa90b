"""Errors every layer may raise."""

from __future__ import annotations


class ConfigError(Exception):
    """A configuration problem, reported as one line naming the file, environment and field."""
