"""Key prefixes: the group a key belongs to, read from its name up to a separator.

`user:1042:cart` with separators ":" and depth 1 belongs to `user:`, with depth 2 to
`user:1042:`. A key with no separator belongs to the empty prefix, shown as "(no prefix)"."""

from __future__ import annotations

import operator
import re
from itertools import repeat

NO_PREFIX = "(no prefix)"


class PrefixRule:
    """key -> prefix: up to `depth` segments, each ending in one of `separators`."""

    def __init__(self, separators: str = ":", depth: int = 1) -> None:
        if not separators:
            raise ValueError("separators: at least one character is needed")
        if depth < 1:
            raise ValueError("depth: must be 1 or more")
        seps = separators.encode()
        # The common case (one separator, depth 1) needs no regex.
        self._sep = seps if len(seps) == 1 and depth == 1 else None
        klass = b"[" + b"".join(re.escape(bytes([c])) for c in seps) + b"]"
        segment = b"(?:(?!" + klass + b").)*" + klass
        # Greedy: as many segments as there are, up to depth.
        self._finder = re.compile(b"(?:" + segment + b"){1,%d}" % depth, re.DOTALL)

    def __call__(self, key: bytes) -> bytes:
        if self._sep is not None:
            return key[: key.find(self._sep) + 1]  # find() is -1 without one: b""
        match = self._finder.match(key)
        return match.group(0) if match else b""

    def many(self, keys: list[bytes]) -> list[bytes]:
        """The prefix of each key; C iterators only in the common case (a million keys)."""
        if self._sep is None:
            return list(map(self, keys))
        ends = map(operator.add, map(bytes.find, keys, repeat(self._sep)), repeat(1))
        return list(map(bytes.__getitem__, keys, map(slice, repeat(0), ends)))


def prefix_rule(separators: str = ":", depth: int = 1) -> PrefixRule:
    """The rule that groups keys by their first `depth` segments."""
    return PrefixRule(separators, depth)


def display(prefix: bytes) -> str:
    """How a prefix is shown: `user:*`, or "(no prefix)" for keys without a separator."""
    if not prefix:
        return NO_PREFIX
    return prefix.decode("utf-8", "backslashreplace") + "*"
