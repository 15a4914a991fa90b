"""Change points over a figure's whole history, located as ruptures' penalised kernel
change-point detection with a linear kernel does (PELT on least squares; reports/pelt.py, its
numpy port), on demand for the series a report, chart or CLI shows."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from datetime import datetime

import duckdb
import numpy as np

from yardstick.reports.pelt import pelt_l2

MIN_POINTS = 8
MIN_SEGMENT = 3
# A located break smaller than this (relative change of segment medians) is noise.
MIN_CHANGE_SHARE = 0.05


@dataclass(frozen=True)
class ChangePoint:
    """Where a series moved to a new level: the first run of the new regime."""

    env: str
    figure: str
    subject: str
    run_id: str
    started_at: datetime
    before_median: float
    after_median: float

    @property
    def change_share(self) -> float:
        """Relative change of the median, after vs before."""
        return (self.after_median - self.before_median) / abs(self.before_median or math.nan)


def _noise_sigma(values: np.ndarray) -> float:
    """Robust noise level: MAD of successive differences (a step barely moves it)."""
    diffs = np.diff(values)
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return max(1.4826 * mad / math.sqrt(2), 1e-12)


def breakpoints(values: list[float]) -> list[int]:
    """Indexes where a new regime starts (PELT with a BIC-like penalty on robust noise)."""
    if len(values) < MIN_POINTS:
        return []
    signal = np.asarray(values, dtype=float)
    sigma = _noise_sigma(signal)
    penalty = 3 * sigma**2 * math.log(len(signal))
    cuts = pelt_l2(signal, penalty, MIN_SEGMENT)[:-1]
    # Drop the smallest break below MIN_CHANGE_SHARE, merge its segments, and look again:
    # the medians a kept break reports are those of the merged segments.
    while cuts:
        shares = []
        bounds = [0, *cuts, len(values)]
        for i, cut in enumerate(cuts):
            before = statistics.median(values[bounds[i] : cut])
            after = statistics.median(values[cut : bounds[i + 2]])
            shares.append(abs(after - before) / abs(before) if before else math.inf)
        smallest = min(range(len(cuts)), key=shares.__getitem__)
        if shares[smallest] >= MIN_CHANGE_SHARE:
            break
        del cuts[smallest]
    return cuts


def series_change_points(
    con: duckdb.DuckDBPyConnection, env: str, figure: str, subject: str = ""
) -> list[ChangePoint]:
    """Change points of one series from the warehouse's figure_trends.

    The series is split first by what was asked (profile and settings: another workload is
    not a change), and absolutes at environment changes (a new version is not a regression)."""
    rows = con.execute(
        "select run_id, started_at, value, nature, segment, series from figure_trends"
        " where env = ? and figure = ? and subject = ? and value is not null"
        " order by started_at, run_id",
        [env, figure, subject],
    ).fetchall()
    pieces: dict[tuple[str, int], list[tuple]] = {}
    for row in rows:
        key = (row[5], row[4] if row[3] == "absolute" else 0)
        pieces.setdefault(key, []).append(row)
    found: list[ChangePoint] = []
    for piece in pieces.values():
        values = [r[2] for r in piece]
        cuts = breakpoints(values)
        bounds = [0, *cuts, len(values)]
        for i, cut in enumerate(cuts):
            found.append(
                ChangePoint(
                    env=env,
                    figure=figure,
                    subject=subject,
                    run_id=piece[cut][0],
                    started_at=piece[cut][1],
                    before_median=statistics.median(values[bounds[i] : cut]),
                    after_median=statistics.median(values[cut : bounds[i + 2]]),
                )
            )
    return found
