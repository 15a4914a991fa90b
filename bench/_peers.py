"""The verdict's peers on the verdicts bench's own series: a textbook CUSUM (numpy, here) and,
asked for with --peers, Apache Otava in a venv of its own (it pins numpy 2.2.0 and downgrades
ruamel.yaml: never the project's venv), fed and read through JSON files. Each peer is tuned on
the steady σ = 2 % series to issue 38's false-alarm bounds, then judged on the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

OTAVA = "apache-otava>=0.8,<0.9"  # the peer's pin, in its own venv only
OTAVA_P_VALUES = (0.01, 0.003, 0.001, 0.0003, 0.0001)  # most sensitive first
CUSUM_H = tuple(np.round(np.arange(2.0, 12.01, 0.25), 2))  # thresholds tried, most sensitive first
CUSUM_K = (0.5, 1.0)  # the textbook k for a 1 σ shift, and for a 2 σ one
WINDOW_RUNS, REFERENCE_RUNS = 10, 30  # the CUSUM's window and the runs before it (as the rule's)
MAX_NIGHT_ALARMS, MAX_SERIES_ALARMED = 0.005, 0.05  # issue 38's bounds on steady σ = 2 %
CALIBRATION = "steady-g2"


def cusum_signs(x: np.ndarray, h: float, k: float, first: int) -> np.ndarray:
    """Page's CUSUM each way over the last WINDOW_RUNS runs, against the mean and standard
    deviation of the REFERENCE_RUNS before them (no median, no cap, no clip: the textbook);
    replicates × nights of -1 (fell), +1 (rose) or 0, from a reference of `first` runs on."""
    replicates, nights = x.shape
    out = np.zeros((replicates, nights), dtype=np.int8)
    for night in range(nights):
        end = night - WINDOW_RUNS + 1  # the reference ends before the window
        reference = x[:, max(0, end - REFERENCE_RUNS) : max(0, end)]
        if reference.shape[1] < first:
            continue
        mean, sd = reference.mean(axis=1), reference.std(axis=1, ddof=1)
        z = (x[:, end : night + 1] - mean[:, None]) / np.where(sd > 0, sd, np.inf)[:, None]
        sums = np.cumsum(z[:, ::-1], axis=1)  # over the last m runs, m = 1..WINDOW_RUNS
        m = np.arange(1, z.shape[1] + 1)
        down, up = (-sums - k * m).max(axis=1), (sums - k * m).max(axis=1)
        out[:, night] = np.where(down >= h, -1, np.where(up >= h, 1, 0))
    return out


def steady_ok(signs: np.ndarray, first: int) -> bool:
    """Whether a peer's alarms on steady series keep within issue 38's bounds."""
    alarmed = signs[:, first:] != 0
    return alarmed.mean() <= MAX_NIGHT_ALARMS and alarmed.any(axis=1).mean() <= MAX_SERIES_ALARMED


def tuned(settings: list, signs_of: Callable[[object], np.ndarray], first: int):
    """The most sensitive setting whose steady alarms keep within the bounds (the last if none)."""
    for setting in settings:
        if steady_ok(signs_of(setting), first):
            return setting
    return settings[-1]


def cusum_peers(data: dict[str, np.ndarray], names: list[str], first: int) -> dict[str, dict]:
    """Per k: the tuned h and the signs on every named scenario."""
    peers = {}
    for k in CUSUM_K:
        h = tuned(list(CUSUM_H), lambda h, k=k: cusum_signs(data[CALIBRATION], h, k, first), first)
        peers[f"CUSUM k = {k:g} (numpy, h {h:g})"] = {
            name: cusum_signs(data[name], h, k, first) for name in names
        }
    return peers


def peers_venv() -> Path:
    """Where the peers' venv lives: the user's cache, never the project's .venv."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "redis-yardstick" / "peers-venv"


def otava_python() -> tuple[Path | None, str]:
    """The peers venv's python with Otava installed in it (made on first use), or why not."""
    venv = peers_venv()
    python = venv / "bin" / "python"
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                           capture_output=True, timeout=300)  # fmt: skip
        found = subprocess.run([str(python), "-c", "import otava"], capture_output=True)
        if found.returncode != 0:
            subprocess.run([str(python), "-m", "pip", "install", "-q", OTAVA], check=True,
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    except subprocess.CalledProcessError as e:
        why = (e.stderr or b"").strip().splitlines()[-1:] if e.stderr else []
        return None, f"{OTAVA} could not be installed in {venv}: {' '.join(map(str, why)) or e}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{OTAVA} could not be installed in {venv}: {e}"
    return python, ""


def run_otava(python: Path, series: dict[str, np.ndarray], p_values, first: int) -> dict:
    """Otava's night-by-night signs (bench/_otava_peer.py in the peers venv), per p-value."""
    script = Path(__file__).with_name("_otava_peer.py")
    with tempfile.TemporaryDirectory(prefix="otava-peer-") as tmp:
        given, got = Path(tmp) / "in.json", Path(tmp) / "out.json"
        given.write_text(json.dumps({
            "series": {name: x.tolist() for name, x in series.items()},
            "p_values": list(p_values), "window_len": REFERENCE_RUNS, "first": first,
            "recent": WINDOW_RUNS,
        }))  # fmt: skip
        subprocess.run([str(python), str(script), str(given), str(got)], check=True,
                       cwd=tmp, timeout=3600)  # fmt: skip
        return json.loads(got.read_text())


def otava_peer(data: dict[str, np.ndarray], names: list[str], first: int) -> tuple[dict, str]:
    """Otava tuned on the steady series ({label: {scenario: signs}}), or why it did not run."""
    python, why = otava_python()
    if python is None:
        return {}, why
    calibration = run_otava(python, {CALIBRATION: data[CALIBRATION]}, OTAVA_P_VALUES, first)
    signs = {p: np.asarray(v[CALIBRATION], dtype=np.int8) for p, v in calibration["alarms"].items()}
    p = tuned([str(p) for p in OTAVA_P_VALUES], lambda p: signs[p], first)
    rest = [name for name in names if name != CALIBRATION]
    judged = run_otava(python, {name: data[name] for name in rest}, [float(p)], first)
    found = {name: np.asarray(v, dtype=np.int8) for name, v in judged["alarms"][p].items()}
    found[CALIBRATION] = signs[p]
    return {f"Otava {calibration['version']} (max_pvalue {p})": found}, ""
