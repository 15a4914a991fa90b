"""The "History at scale" table of docs/scale.md from a bench/retention.py JSON: targets vs figures.

Prints the markdown table (targets, the figures measured, met or missed) for docs/scale.md:

    .venv/bin/python bench/readme_table.py /work/bench-tmp/retention-5x30.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GiB = float(1 << 30)


def shown(value: float | None, unit: str) -> str:
    """A figure as docs/scale.md writes it."""
    if value is None:
        return "not measured"
    if unit == "bytes":
        return f"{value / GiB:.2f} GiB"
    if unit == "share":
        return f"{value:+.1%}"
    if unit == "s":
        return f"{value:.1f} s"
    if unit == "ms":
        return f"{value:.1f} ms"
    if unit == "files" and float(value).is_integer():
        return f"{value:,.0f} files"
    if unit == "files":
        return f"{value:+.3f} files"
    return f"{value:,.0f} {unit}"


def detail(name: str, figs: dict) -> str:
    """What docs/scale.md adds after a figure (its parts, the other size)."""
    if name == "lake_files":
        return f" ({figs['lake_bytes'] / GiB:.2f} GiB)"
    if name == "rebuild_wall_s" and figs.get("rebuild_load_s") is not None:
        extra = f" (load {figs['rebuild_load_s']:.1f} s, models {figs['rebuild_models_s']:.1f} s"
        if figs.get("doubled_rebuild_wall_s") is not None:
            extra += f"; {figs['doubled_rebuild_wall_s']:.1f} s at {figs['doubled_days']} days"
        return extra + ")"
    if name == "rebuild_rss_bytes" and figs.get("doubled_rebuild_rss_bytes"):
        doubled = figs["doubled_rebuild_rss_bytes"] / GiB
        return f" ({doubled:.2f} GiB at {figs['doubled_days']} days)"
    if name == "incremental_wall_s" and figs.get("incremental_load_s") is not None:
        return (
            f" (load {figs['incremental_load_s']:.1f} s, models "
            f"{figs['incremental_models_s']:.1f} s)"
        )
    if name == "first_vs_warm_change" and figs.get("first_update_wall_s") is not None:
        return f" ({figs['first_update_wall_s']:.1f} s vs {figs['warm_update_wall_s']:.1f} s)"
    if name == "doubling_change" and figs.get("doubled_incremental_wall_s") is not None:
        return (
            f" ({figs['doubled_incremental_wall_s']:.1f} s at {figs['doubled_days']} days vs "
            f"{figs['incremental_wall_s']:.1f} s)"
        )
    if name == "slowlog_rows_quiet_collection":
        return f" ({figs['slowlog_rows_per_collection']:.1f} rows per collection on average)"
    if name == "trend_query_ms" and figs.get("trend_points") is not None:
        return f" ({figs['trend_points']} points)"
    return ""


def table(record: dict) -> str:
    """The markdown table and the line that says where it was measured."""
    figs = record["figures"]
    env = record["environment"]
    git = env["git"]
    machine = env["machine"]
    # The files a figure depends on most (the warehouse's), the rest counted.
    storage = [p for p in git["modified"] if p.startswith("yardstick/storage/")]
    others = len(git["modified"]) - len(storage)
    modified = ""
    if storage:
        modified = f", uncommitted changes in {', '.join(storage)}"
        modified += f" and {others} other files" if others else ""
    elif others:
        modified = f", uncommitted changes in {others} files (none in yardstick/storage/)"
    lines = [
        f"Measured by `bench/retention.py --envs {figs['envs']} --days {figs['days']}` "
        f"({record['size']['collections_per_day']} collections a day, "
        f"{record['size']['keys']:,} keys; revision {str(git['commit'])[:10]}{modified}; "
        f"{machine['cores']} cores, load {machine['load_1m']:.2f} at the start; "
        f"shape of real runs from {record['real_shape']['at'][:10]}):",
        "",
        f"| target (50 environments × 365 days) | measured at {figs['envs']} × {figs['days']} | |",
        "| --- | --- | --- |",
    ]
    for goal in record["targets"]:
        state = {True: "met", False: "missed", None: "not measured"}[goal["met"]]
        value = shown(goal["measured"], goal["unit"])
        extra = detail(goal["name"], figs) if goal["measured"] is not None else ""
        lines.append(f"| {goal['target'].replace('<=', '≤')} | {value}{extra} | {state} |")
    return "\n".join(lines)


def main() -> None:
    """Print the table of one JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="a bench/retention.py --json file")
    print(table(json.loads(parser.parse_args().json.read_text())))


if __name__ == "__main__":
    main()
