"""Two bench records side by side: each figure of A and of B, with B ÷ A.

    .venv/bin/python bench/compare.py A.json B.json

A record written by the harness (bench/_harness.py) lists its figures under "metrics"; an
older record without them is read by its numeric "figures" (the files in bench/results/)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def figures_of(record: dict) -> dict[str, tuple[float | None, str, float | None]]:
    """name -> (value, unit, target) of one record."""
    if "metrics" in record:
        return {m["name"]: (m["value"], m["unit"], m.get("target")) for m in record["metrics"]}
    out: dict[str, tuple[float | None, str, float | None]] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, int | float):
            out[prefix] = (float(value), "", None)
        elif isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)

    walk("", record.get("figures", {}))
    return out


def load(path: Path) -> dict:
    """One record; a missing or unreadable file is one line on stderr and exit 2."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"compare: {path}: {exc}") from None
    if not isinstance(record, dict):
        raise SystemExit(f"compare: {path}: not a bench record")
    return record


def shown(value: float | None) -> str:
    """A figure in a column: 4 significant digits."""
    return "—" if value is None else f"{value:.4g}"


def table(a: dict, b: dict, a_name: str = "A", b_name: str = "B") -> str:
    """The side-by-side table of two records (figures of either, in A's order then B's)."""
    fa, fb = figures_of(a), figures_of(b)
    names = list(fa) + [n for n in fb if n not in fa]
    rows = [f"| figure | unit | {a_name} | {b_name} | {b_name} ÷ {a_name} | target |"]
    rows.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in names:
        va, unit, target = fa.get(name, (None, "", None))
        vb, unit_b, target_b = fb.get(name, (None, "", None))
        ratio = "—" if not va or vb is None else f"{vb / va:.2f}"
        goal = target if target is not None else target_b
        rows.append(
            f"| {name} | {unit or unit_b} | {shown(va)} | {shown(vb)} | {ratio} | {shown(goal)} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Print the two records' figures side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="the first record (the baseline)")
    parser.add_argument("b", type=Path, help="the second record")
    args = parser.parse_args(argv)
    a, b = load(args.a), load(args.b)
    if a.get("bench") != b.get("bench"):
        print(f"note: different benches ({a.get('bench')} and {b.get('bench')})", file=sys.stderr)
    for label, record in (("A", a), ("B", b)):
        git = (record.get("environment") or {}).get("git") or {}
        started = record.get("started") or (record.get("environment") or {}).get("at")
        print(f"{label}: {record.get('bench')} at {started}, commit {git.get('commit')}")
    print(table(a, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
