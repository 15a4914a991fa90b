"""Penalised change-point detection on least squares (PELT), a line-for-line numpy port of
ruptures' `KernelCPD(kernel="linear").predict(pen=...)` (its C `ekcpd_pelt_compute`): the same
breakpoints, same arithmetic in the same order, without importing ruptures and scipy (a second
of CPU before `yardstick trend` could answer). tests/test_pelt.py compares both."""

from __future__ import annotations

import numpy as np


def pelt_l2(values, penalty: float, min_size: int) -> list[int]:
    """The ends of the segments that minimise the sum of squared deviations from each
    segment's mean plus `penalty` per segment, each segment at least `min_size` long; the last
    end is len(values), as ruptures returns them."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    done = np.zeros(n + 1)  # D: sum of x^2 up to t
    cross = np.zeros(n + 1)  # S[s]: the kernel sum over the segment s..t, updated as t grows
    best = np.zeros(n + 1)  # M_V: the penalised cost of the best segmentation of 0..t
    pruning = np.zeros(n + 1)  # M_pruning: the unpenalised cost through s, for pruning
    path = np.zeros(n + 1, dtype=np.int64)  # M_path: where the last segment of 0..t starts
    s_min = 0
    for t in range(1, min(2 * min_size, n + 1)):
        # Shorter than two segments: no change point, one segment 0..t.
        _extend(x, t, 0, done, cross)
        best[t] = done[t] - done[0] - cross[0] / t + penalty
    for t in range(2 * min_size, n + 1):
        _extend(x, t, s_min, done, cross)
        starts = np.concatenate(
            ([s_min], np.arange(max(s_min + 1, min_size), t - min_size + 1, dtype=np.int64))
        )
        through = best[starts] + (done[t] - done[starts] - cross[starts] / (t - starts))
        pruning[starts] = through
        penalised = through + penalty
        first_min = int(np.argmin(penalised))  # the earliest start on a tie, as the C loop
        best[t], path[t] = penalised[first_min], starts[first_min]
        while pruning[s_min] >= best[t] and s_min < t - min_size + 1:
            s_min = min_size if s_min == 0 else s_min + 1
    ends, end = [], n
    while end > 0:
        ends.append(end)
        end = int(path[end])
    return ends[::-1]


def _extend(x: np.ndarray, t: int, s_min: int, done: np.ndarray, cross: np.ndarray) -> None:
    """Take x[t-1] into D and into S[s] for every start s >= s_min (the C loop's order: the
    running kernel sum from s = t-1 down to s_min)."""
    diag = x[t - 1] * x[t - 1]
    done[t] = done[t - 1] + diag
    running = np.cumsum(x[s_min:t][::-1] * x[t - 1])[::-1]
    cross[s_min:t] += 2 * running - diag
