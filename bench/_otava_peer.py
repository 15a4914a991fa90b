"""Apache Otava on the verdicts bench's series, night by night: run by the peers venv's own
python (bench/_peers.py makes it; Otava pins numpy 2.2.0, never the project's venv), with a
JSON file in and one out, so nothing of the project is imported here.

    python _otava_peer.py IN.json OUT.json

IN: {"series": {name: [[value per night] per replicate]}, "p_values": [...], "window_len": 30,
"first": 10, "recent": 10}. OUT: {"version": ..., "alarms": {p: {name: [[sign per night]]}}}:
on night t, Otava is given the nights 0..t (what it would know that night); the sign is that
of the latest change point it finds among the last `recent` nights (mean after minus mean
before: -1 fell, +1 rose), 0 when none (and before night `first`)."""

from __future__ import annotations

import importlib.metadata
import json
import sys

from otava.analysis import compute_change_points


def night_signs(values: list[float], p_value: float, window_len: int, first: int, recent: int):
    """The sign said on each night of one series (0: no recent change point)."""
    out = [0] * len(values)
    for night in range(first, len(values)):
        points, _ = compute_change_points(
            values[: night + 1], window_len=window_len, max_pvalue=p_value
        )
        fresh = [c for c in points if c.index > night - recent]
        if fresh:
            last = max(fresh, key=lambda c: c.index)
            out[night] = 1 if last.stats.mean_2 > last.stats.mean_1 else -1
    return out


def main() -> None:
    """Read the series, judge each night at each p-value, write the signs."""
    given = json.loads(open(sys.argv[1]).read())
    alarms = {
        str(p): {
            name: [
                night_signs(row, p, given["window_len"], given["first"], given["recent"])
                for row in rows
            ]
            for name, rows in given["series"].items()
        }
        for p in given["p_values"]
    }
    version = importlib.metadata.version("apache-otava")
    with open(sys.argv[2], "w") as out:
        json.dump({"version": version, "alarms": alarms}, out)


if __name__ == "__main__":
    main()
