"""Arrow schemas of every lake table: the run's own (runs, steps, retained figures) declared
here, each measurement family's collected from its module (yardstick/tasks/, `FAMILY.tables`).

Files carry no `env` column: it comes from the folder (`env=<env>`); a run's day comes from its
run id. The lake adds `run_id` and `schema_version`."""

from __future__ import annotations

import pyarrow as pa

from yardstick.host import familyload, selfcost
from yardstick.tasks import registry
from yardstick.tasks.base import FAMILY_LOAD, UTC_TS, rows_to_table

# Bump when a table gains a column; older files still load (missing columns are null).
SCHEMA_VERSION = 1


# The run's own tables; the families' follow (see _with_family_tables).
TABLES: dict[str, pa.Schema] = {
    # One row per environment per run: what ran, how it ended.
    "runs": pa.schema(
        [
            ("profile", pa.string()),
            ("started_at", UTC_TS),
            ("finished_at", UTC_TS),
            ("duration_s", pa.float64()),
            ("status", pa.string()),  # ok | partial | failed
            ("error", pa.string()),
            ("mode", pa.string()),
            ("transport", pa.string()),
            ("url", pa.string()),  # credentials removed
            ("host_group", pa.string()),
            ("same_server_as", pa.string()),
            ("prober_on_host", pa.bool_()),
            ("tool_version", pa.string()),
            # Who measured: the environment's site, the machine and process of the prober,
            # and the Prefect flow run (a site's own run when the nightly fanned out).
            ("site", pa.string()),
            ("prober_hostname", pa.string()),
            ("prober_pid", pa.int64()),
            ("worker_pid", pa.int64()),  # the Prefect worker that started the prober, if any
            ("flow_run_id", pa.string()),
        ]
    ),
    # One row per measurement family per environment per run.
    "steps": pa.schema(
        [
            ("family", pa.string()),
            ("status", pa.string()),  # ok | failed | skipped
            ("reason", pa.string()),
            ("started_at", UTC_TS),
            ("finished_at", UTC_TS),
            ("duration_s", pa.float64()),
            ("window_s", pa.float64()),  # time spent inside measurement windows
            # The profile settings the family was asked to run with, and their digest: a
            # figure is compared only with points of the same profile and digest.
            ("params", pa.string()),
            ("params_digest", pa.string()),
        ]
    ),
}

# Figures kept when their per-run detail is dropped (yardstick/storage/retention.py): the measures
# rows the warehouse derived, so a rebuild from the lake alone still has them.
TABLES["retained_measures"] = pa.schema(
    [
        ("figure", pa.string()),
        ("subject", pa.string()),
        ("window_idx", pa.int32()),
        ("value", pa.float64()),
        ("samples", pa.int64()),
    ]
)


# Series declared the new normal in the environments file (`rebaseline:`), landed with each
# run of their environment while declared: who, when and why, in the lake (docs/verdict.md).
TABLES["rebaselines"] = pa.schema(
    [
        ("figure", pa.string()),
        ("subject", pa.string()),  # null: every subject of the figure
        ("declared", pa.date32()),
        ("declared_by", pa.string()),
        ("why", pa.string()),
    ]
)


# The host's load sampled through each family of a run (yardstick/host/familyload.py): one
# row per sample, landed with the family's own tables (yardstick/tasks/base.py, Family.run).
TABLES[FAMILY_LOAD] = familyload.SCHEMA

# The tool's own CPU and peak memory per phase of a run (yardstick/host/selfcost.py): start,
# families and landing land with the run's other tables, before its warehouse update; the
# warehouse and rendering phases after it, in a second commit (LATE_TABLES).
TABLES[selfcost.TOOL_COST] = selfcost.SCHEMA

# Tables a run adds rows to after its `runs` row landed and after the warehouse loaded it:
# an update must load a loaded run's new rows of these (docs/reports.md, "The tool's own cost").
LATE_TABLES = (selfcost.TOOL_COST,)


def _with_family_tables(tables: dict[str, pa.Schema]) -> dict[str, pa.Schema]:
    """The run's tables, then every family's (by family name); a name declared twice is refused."""
    merged = dict(tables)
    for family in registry.families().values():
        for name, schema in family.tables.items():
            if name in merged:
                raise RuntimeError(f"table {name!r} of family {family.name!r} is declared twice")
            merged[name] = schema
    return merged


TABLES = _with_family_tables(TABLES)

# Large per-run tables kept as landed (one file per run, not compacted) until retention drops
# them, keeping the figures derived from them; with the family each belongs to.
DETAIL_FAMILIES: dict[str, str] = {
    table: family.name for family in registry.families().values() for table in family.detail_tables
}
DETAIL_TABLES = tuple(sorted(DETAIL_FAMILIES))

# Columns the lake adds to every file.
COMMON_FIELDS = [pa.field("run_id", pa.string()), pa.field("schema_version", pa.int16())]


def file_schema(table: str) -> pa.Schema:
    """Full schema of a lake file for `table` (common columns first)."""
    schema = TABLES[table]
    return pa.schema([*COMMON_FIELDS, *schema])


def to_table(table: str, rows: list[dict]) -> pa.Table:
    """Build an Arrow table for `table` from row dicts (unknown keys are an error)."""
    return rows_to_table(table, TABLES[table], rows)
