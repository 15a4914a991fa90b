"""reports/pelt.py finds exactly the breakpoints ruptures' KernelCPD (linear kernel, a penalty)
finds, on noise, steps, ties and values of every magnitude, for every segment length."""

from __future__ import annotations

import random

import numpy as np
import pytest

from yardstick.reports.pelt import pelt_l2

ruptures = pytest.importorskip("ruptures")


def series(rng: random.Random, n: int) -> list[float]:
    """One series of a kind that has tripped change-point code: noise, a step, ties, spread."""
    kind = rng.randrange(4)
    if kind == 0:
        return [rng.gauss(100, 5) for _ in range(n)]
    if kind == 1:
        step = rng.randrange(1, n)
        return [rng.gauss(100 if i < step else 130, 5) for i in range(n)]
    if kind == 2:
        return [float(rng.randint(0, 3)) for _ in range(n)]  # many equal costs
    return [rng.choice([1.0, 1.0, 2.0]) * 10 ** rng.randint(-3, 6) for _ in range(n)]


def test_the_port_finds_ruptures_breakpoints():
    rng = random.Random(36)
    compared = 0
    for _ in range(800):
        n = rng.choice([6, 8, 9, 12, 20, 45, 90, 160])
        min_size = rng.choice([1, 2, 3, 5])
        if n < 2 * min_size:
            continue
        signal = np.asarray(series(rng, n))
        penalty = rng.choice([0.01, 1.0, 10.0, 1e4]) * (float(np.var(signal)) + 1e-9)
        theirs = ruptures.KernelCPD(kernel="linear", min_size=min_size).fit(signal)
        expected = [int(end) for end in theirs.predict(pen=penalty)]
        assert pelt_l2(signal, penalty, min_size) == expected, (list(signal), penalty, min_size)
        compared += 1
    assert compared > 600
