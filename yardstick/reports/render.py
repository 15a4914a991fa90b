"""Render markdown reports from the warehouse: templates format, SQL has already computed."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import duckdb
import jinja2
from jinja2 import Environment as Jinja
from jinja2 import FileSystemBytecodeCache, PackageLoader, StrictUndefined

from yardstick.reports.charts import MOVED, render_charts, render_verdict_charts, trend_figures
from yardstick.reports.labels import figure_label, unit_label
from yardstick.reports.numbers import fmt
from yardstick.storage.warehouse import connect_read_only

NATURE_LABEL = {
    "absolute": "absolute (this machine only)",
    "ratio": "ratio (transfers)",
}

# The absolutes the index shows beside each environment (index.md.j2); with the catalog's key
# ratios (its trend_chart column, the trend chart's panels) they head an environment's report.
HEADLINE_ABSOLUTES = ("rtt_client_p50_us", "server_ping_usec_per_call")


def quantity(value: Any, unit: str | None) -> str:
    """A figure's value with its unit, as a sentence shows it: 72.3 µs, 48.2×, 97.9 % (a
    share). The unit is the figure catalog's (a `figures` row's, or `catalog[name]`'s)."""
    if not unit or unit == "share":
        return fmt(value, unit)
    if unit == "×":
        return f"{fmt(value, unit)}×"
    return f"{fmt(value, unit)} {unit}"


def measured_by(run: dict) -> str:
    """The machine and worker that measured a run, as its own row says: `host (worker pid N)`."""
    worker = f" (worker pid {run['worker_pid']})" if run.get("worker_pid") else ""
    return f"{run['prober_hostname']}{worker}"


def _bytecode_cache() -> FileSystemBytecodeCache | None:
    """Compiled templates kept between runs (~1 CPU-s a run: 18 templates compiled afresh),
    in the user's cache folder; none where it cannot be written. Jinja keys each entry by
    the template's source checksum, so an edited template is compiled again."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    folder = Path(root) / "yardstick" / f"jinja-{jinja2.__version__}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return FileSystemBytecodeCache(str(folder)) if os.access(folder, os.W_OK) else None


def _jinja() -> Jinja:
    """The template environment (markdown, so no HTML escaping)."""
    env = Jinja(
        loader=PackageLoader("yardstick.reports", "templates"),
        bytecode_cache=_bytecode_cache(),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["fmt"] = fmt
    env.filters["quantity"] = quantity
    env.filters["measured_by"] = measured_by
    env.filters["nature"] = lambda nature: NATURE_LABEL.get(nature, nature)
    env.filters["unit_label"] = unit_label
    # A figures row's catalog label, as a table cell names the figure.
    env.filters["described"] = lambda row: figure_label(row["figure"])
    return env


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    """Query rows as dicts."""
    cursor = con.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _write(path: Path, text: str) -> None:
    """Replace a file atomically so a reader never sees half a report."""
    # Per process and thread: two runs rendering into one folder never share a temporary file.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def section_templates(jinja: Jinja) -> dict[str, str]:
    """family -> template name, for every `sections/<family>.md.j2` that exists."""
    return {
        name.removeprefix("sections/").removesuffix(".md.j2"): name
        for name in jinja.list_templates()
        if name.startswith("sections/") and name.endswith(".md.j2")
    }


def figure_catalog(con: duckdb.DuckDBPyConnection) -> dict[str, dict]:
    """figure -> its catalog row (unit, nature, better, ...; sql/seeds/figure_catalog.csv),
    for a template that names a figure whether or not this run measured it."""
    return {row["figure"]: row for row in _rows(con, "select * from figure_catalog")}


def headline_figures(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The figures an environment's report opens with, in order: HEADLINE_ABSOLUTES, then the
    catalog's key ratios."""
    return [*HEADLINE_ABSOLUTES, *(f for f in trend_figures(con) if f not in HEADLINE_ABSOLUTES)]


def headline_rows(figures: list[dict], names: list[str], across: str = "subjects") -> list[dict]:
    """One row per headline figure this run measured: its description, unit and nature, and
    its value, or the lowest and highest of its subjects (benchmark cells, or a cluster's
    servers: `across` says which) when it has several."""
    rows = []
    for name in names:
        mine = [f for f in figures if f["figure"] == name]
        if not mine:
            continue
        by_value = sorted(mine, key=lambda f: f["value"])
        first = mine[0]
        rows.append(
            {
                "figure": name,
                "description": figure_label(name),
                "unit": first["unit"],
                "nature": first["nature"],
                "low": by_value[0],
                "high": by_value[-1],
                "subjects": len(mine),
                "across": across,
                "noisy": sum(1 for f in mine if f["noisy"]),
            }
        )
    return rows


def _latest_runs(con: duckdb.DuckDBPyConnection, run_id: str | None) -> list[dict]:
    """The run rows to report: those of `run_id`, or each environment's latest."""
    if run_id:
        return _rows(con, "select * from runs where run_id = ? order by env", [run_id])
    # Collections land a run every few minutes; a report shows the latest full run, which
    # the warehouse keeps per environment (yardstick/sql/models/marts/history/latest_full_runs.sql).
    return _rows(
        con,
        "select r.* from runs as r semi join latest_full_runs as l"
        " on l.run_id = r.run_id and l.env = r.env order by r.env",
    )


def environment_context(con: duckdb.DuckDBPyConnection, run: dict) -> dict:
    """Everything one environment's template shows, read from the warehouse."""
    key = [run["run_id"], run["env"]]
    facts = _rows(con, "select * from env_facts where run_id = ? and env = ?", key)
    figures = _rows(
        con,
        "select * from figures where run_id = ? and env = ? order by position, figure, subject",
        key,
    )
    families: dict[str, list[dict]] = {}
    for figure in figures:
        families.setdefault(figure["family"], []).append(figure)
    steps = _rows(con, "select * from steps where run_id = ? and env = ? order by started_at", key)
    tables = _report_tables(con, key)
    return {
        "run": run,
        "facts": facts[0] if facts else None,
        "steps": steps,
        "families": families,
        "by_name": {f["figure"]: f for f in figures},
        # (figure, subject) -> figure: a replica's or a shard's figure, named by its subject.
        "by_subject": {(f["figure"], f["subject"]): f for f in figures},
        "headline": headline_rows(figures, headline_figures(con)),
        "tables": tables,
        "verdict": verdict_context(con, run, tables.get("changes", [])),
        "catalog": figure_catalog(con),
    }


def verdict_context(con: duckdb.DuckDBPyConnection, run: dict, judged: list[dict]) -> dict:
    """Tonight's verdict for one environment's run: the counts, what moved, what could not be
    judged, and the runs of this environment that crashed."""
    summary = _rows(
        con, "select * from verdicts where env = ? and run_id = ?", [run["env"], run["run_id"]]
    )
    return {
        "summary": summary[0] if summary else None,
        "moved": [r for r in judged if r["verdict"] in MOVED],
        "noisy": [r for r in judged if r["verdict"] == "noisy"],
        "environment_changed": [r for r in judged if r["verdict"] == "environment changed"],
        "candidates": _candidates(con, run),
        "crashed": _rows(
            con, "select * from crashed_runs where env = ? order by run_id", [run["env"]]
        ),
    }


def _candidates(con: duckdb.DuckDBPyConnection, run: dict) -> list[dict]:
    """Everything that moved beside each change, likely or not (report_change_candidates;
    none from a warehouse built before that view)."""
    try:
        return _rows(
            con,
            "select * from report_change_candidates where env = ? and run_id = ?"
            " order by figure, subject, cause_rank",
            [run["env"], run["run_id"]],
        )
    except duckdb.CatalogException:
        return []


def _report_tables(con: duckdb.DuckDBPyConnection, key: list[str]) -> dict[str, list[dict]]:
    """Rows of every `report_<name>` view for this run and environment, keyed by <name>.

    A family whose section needs more than figures (a matrix, a list of entries) adds a
    `report_*` view with run_id and env columns in its SQL model; templates read it here."""
    names = [
        r[0]
        for r in con.execute(
            "select view_name from duckdb_views() where schema_name = 'reports'"
            " and view_name like 'report\\_%' escape '\\' order by view_name"
        ).fetchall()
    ]
    return {
        name.removeprefix("report_"): _rows(
            con, f"select * from reports.{name} where run_id = ? and env = ?", key
        )
        for name in names
    }


def with_own_cost(tables: dict[str, list[dict]], own_cost: list[dict]) -> None:
    """Add this run's phases measured in this process but not in the warehouse yet (its own
    update) to the report's tool-cost rows, and their CPU to the run's total against the
    measurement windows (the division report_tool_cost_run makes for the loaded phases)."""
    shown = tables.setdefault("tool_cost", [])
    loaded = {(row["phase"], row["prober_pid"]) for row in shown if row["run_wide"]}
    added = [row for row in own_cost if (row["phase"], row["prober_pid"]) not in loaded]
    # Where report_tool_cost's phase_order puts them: after the landing.
    order = {"warehouse": 5, "rendering": 6, "total": 7}
    for row in added:
        cores_s = row["wall_s"] * row["cores"]  # as tool_cost.cpu_share_of_cores divides
        share = row["cpu_s"] / cores_s if cores_s else None
        phase_order = order.get(row["phase"], 8)
        shown.append({**row, "phase_order": phase_order, "cpu_share_of_cores": share})
    for run in tables.get("tool_cost_run", []):
        mine = [row for row in added if row["prober_pid"] == run.get("prober_pid")]
        if mine and run["tool_cpu_s"] is not None:
            run["tool_cpu_s"] += sum(row["cpu_s"] for row in mine)
            run["phases"] = ", ".join(filter(None, [run["phases"], *(r["phase"] for r in mine)]))
            windows_s = run["windows_s"]
            run["tool_cpu_per_window_s"] = run["tool_cpu_s"] / windows_s if windows_s else None


def render_reports(
    warehouse_path: str | Path,
    out_dir: str | Path,
    run_id: str | None = None,
    sites: list[dict] | None = None,
    own_cost: list[dict] | None = None,
    not_landed: list[dict] | None = None,
    lake_notes: list[str] | None = None,
) -> dict[str, Path]:
    """Write <out>/<env>.md per environment, index.md and comparison.md; return env -> path.
    `sites`: what a fanned-out nightly run knows of each remote site (yardstick/flows/sites.py);
    `own_cost`: the tool's cost of this run's phases the warehouse does not hold yet
    (selfcost.Meter.report_rows: its own update); `not_landed`: the environments whose run
    did not land, and why (flows/outcome.not_landed_of), named in the index and comparison;
    `lake_notes`: what the check of the lake's log repaired or refused (storage/loghealth.py),
    one line each in the index."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jinja = _jinja()
    con = connect_read_only(warehouse_path, who=f"run {run_id}" if run_id else None)
    try:
        contexts = [environment_context(con, run) for run in _latest_runs(con, run_id)]
        for context in contexts:
            with_own_cost(context["tables"], own_cost or [])
        member_of = dict(
            con.execute("select member, member_of from environment_members").fetchall()
        )
        for context in contexts:
            context["member_of"] = member_of.get(context["run"]["env"])
            # A member's report is one folder down: its links to charts/ go up one.
            up = "../" if context["member_of"] else ""
            context["charts"] = [
                {**chart, "file": up + chart["file"]}
                for chart in render_charts(con, out, context["run"])
            ]
            moved = context["verdict"]["moved"]
            files = render_verdict_charts(con, out, context["run"], moved)
            for row in moved:
                chart = files.get((row["figure"], row["subject"]))
                row["chart"] = up + chart if chart else chart
        comparison = comparison_context(con)
        catalog = figure_catalog(con)
        rebuild = last_rebuild(con)
        headline = headline_figures(con)
    finally:
        con.close()
    # The configured environments get a report each and a line in the index; the servers
    # they are made of (a cluster's nodes, a primary's replicas) are shown in their
    # environment's report, their own full reports under members/ (linked from it).
    configured = [c for c in contexts if not c["member_of"]]
    for context in configured:
        context["members"] = [c for c in contexts if c["member_of"] == context["run"]["env"]]
        if context["members"] and not context["headline"]:
            # A cluster measures round trips on its servers, not on itself: their range heads
            # its report, each value named by its server (as the index does for p50).
            pooled = [
                {**f, "subject": " ".join(filter(None, (m["run"]["env"], f["subject"])))}
                for m in context["members"]
                for f in m["by_subject"].values()
            ]
            context["headline"] = headline_rows(pooled, headline, across="servers")
    servers_shown = shaped_environments(configured)
    written: dict[str, Path] = {}
    template = jinja.get_template("environment.md.j2")
    sections = section_templates(jinja)
    for context in contexts:
        name = f"{context['run']['env']}.md"
        path = out / "members" / name if context["member_of"] else out / name
        path.parent.mkdir(exist_ok=True)
        if context["member_of"]:
            # Written at the top before members had their folder: never updated again there.
            (out / name).unlink(missing_ok=True)
        _write(path, template.render(**context, sections=sections))
        written[context["run"]["env"]] = path
    _write(
        out / "index.md",
        jinja.get_template("index.md.j2").render(
            environments=configured,
            sites=sites or [],
            catalog=catalog,
            rebuild=rebuild,
            not_landed=not_landed or [],
            lake_notes=lake_notes or [],
            servers_shown=servers_shown,
        ),
    )
    _write(
        out / "comparison.md",
        jinja.get_template("comparison.md.j2").render(
            **comparison, not_landed=not_landed or [], servers_shown=servers_shown
        ),
    )
    return written


def shaped_environments(configured: list[dict]) -> list[dict]:
    """The configured environments made of several servers, with their servers' rows (the
    index and the comparison list each one's members: role, health, lag)."""
    return [
        {
            "env": c["run"]["env"],
            **{
                name: c["tables"].get(name, [])
                for name in ("topology", "topology_nodes", "topology_change")
            },
        }
        for c in configured
        if len(c["tables"].get("topology_nodes", [])) > 1
    ]


def last_rebuild(con: duckdb.DuckDBPyConnection) -> dict | None:
    """What the warehouse's last full rebuild imported from the lake's derived days and what it
    derived again from the raw rows (None for a warehouse built before this was kept)."""
    try:
        found = con.execute(
            "select value from yardstick.meta where key = 'last_rebuild'"
        ).fetchone()
    except duckdb.Error:
        return None
    return json.loads(found[0]) if found else None


def comparison_context(con: duckdb.DuckDBPyConnection) -> dict:
    """Every environment's latest full run, figures pivoted to one row per figure and subject."""
    environments = _rows(con, "select * from comparison_environments")
    figures = _rows(
        con, "select * from comparison order by position, figure, subject, pair_group, env"
    )
    pivot: dict[str, dict[tuple[str, str], dict]] = {"ratio": {}, "absolute": {}}
    for figure in figures:
        key = (figure["figure"], figure["subject"])
        rows = pivot[figure["nature"]]
        if key not in rows:
            rows[key] = {
                "figure": key[0],
                "subject": key[1],
                "unit": figure["unit"],
                "description": figure_label(key[0]),
                # A figure's description is written on its first subject's row only.
                "first": not any(name == key[0] for name, _ in rows),
                "by_env": {},
            }
        rows[key]["by_env"][figure["env"]] = figure
    reasons = [f["not_transferable_because"] for f in figures if f["nature"] == "absolute"]
    return {
        "environments": environments,
        "verdicts": {v["env"]: v for v in _rows(con, "select * from verdicts")},
        "ratios": list(pivot["ratio"].values()),
        "absolutes": list(pivot["absolute"].values()),
        "reasons": [r for r in dict.fromkeys(reasons) if r],
    }
