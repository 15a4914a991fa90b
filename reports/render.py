"""Render markdown reports from the warehouse: templates format, SQL has already computed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb
from jinja2 import Environment as Jinja, PackageLoader, StrictUndefined

from yardstick.warehouse import connect_read_only

NATURE_LABEL = {
    "absolute": "absolute (this machine only)",
    "ratio": "ratio (transfers)",
}


def fmt(value: Any, unit: str | None = None) -> str:
    """A number for people: 3 significant digits, thousands separators, shares as percent."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if unit == "share":
        return f"{value * 100:.1f} %"
    magnitude = abs(value)
    if magnitude >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _jinja() -> Jinja:
    """The template environment (markdown, so no HTML escaping)."""
    env = Jinja(
        loader=PackageLoader("yardstick.reports", "templates"),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["fmt"] = fmt
    env.filters["nature"] = lambda nature: NATURE_LABEL.get(nature, nature)
    return env


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    """Query rows as dicts."""
    cursor = con.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _write(path: Path, text: str) -> None:
    """Replace a file atomically so a reader never sees half a report."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _latest_runs(con: duckdb.DuckDBPyConnection, run_id: str | None) -> list[dict]:
    """The run rows to report: those of `run_id`, or each environment's latest."""
    if run_id:
        return _rows(con, "select * from stg_runs where run_id = ? order by env", [run_id])
    return _rows(
        con,
        "select * from stg_runs qualify row_number() over "
        "(partition by env order by started_at desc, run_id desc) = 1 order by env",
    )


def environment_context(con: duckdb.DuckDBPyConnection, run: dict) -> dict:
    """Everything one environment's template shows, read from the warehouse."""
    key = [run["run_id"], run["env"]]
    facts = _rows(con, "select * from env_facts where run_id = ? and env = ?", key)
    figures = _rows(
        con, "select * from figures where run_id = ? and env = ? order by position", key
    )
    families: dict[str, list[dict]] = {}
    for figure in figures:
        families.setdefault(figure["family"], []).append(figure)
    steps = _rows(
        con, "select * from stg_steps where run_id = ? and env = ? order by started_at", key
    )
    return {
        "run": run,
        "facts": facts[0] if facts else None,
        "steps": steps,
        "families": families,
        "by_name": {f["figure"]: f for f in figures},
    }


def render_reports(
    warehouse_path: str | Path, out_dir: str | Path, run_id: str | None = None
) -> dict[str, Path]:
    """Write <out>/<env>.md per environment and <out>/index.md; return env -> path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jinja = _jinja()
    con = connect_read_only(warehouse_path)
    try:
        contexts = [environment_context(con, run) for run in _latest_runs(con, run_id)]
    finally:
        con.close()
    written: dict[str, Path] = {}
    template = jinja.get_template("environment.md.j2")
    for context in contexts:
        path = out / f"{context['run']['env']}.md"
        _write(path, template.render(**context))
        written[context["run"]["env"]] = path
    _write(out / "index.md", jinja.get_template("index.md.j2").render(environments=contexts))
    return written
