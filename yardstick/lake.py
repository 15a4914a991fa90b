"""The lake: append-only Parquet files at lake/<table>/env=<env>/date=<day>/<run_id>.parquet."""

from __future__ import annotations

import os
import secrets
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from yardstick.schemas import SCHEMA_VERSION, file_schema


class LakeConflict(Exception):
    """A file for this table, environment and run already exists: the lake never overwrites."""


def new_run_id(now: datetime | None = None) -> str:
    """A sortable, unique run id such as 20261129T224501Z-3f9a1c."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def run_day(run_id: str) -> date:
    """The UTC day a run started, read from its id: every table of a run shares it."""
    return datetime.strptime(run_id[:8], "%Y%m%d").date()


def file_path(lake_dir: Path, table: str, env: str, run_id: str) -> Path:
    """Where the file of `table` for one environment and run lives."""
    day = f"date={run_day(run_id):%Y-%m-%d}"
    return lake_dir / table / f"env={env}" / day / f"{run_id}.parquet"


def write(lake_dir: str | Path, table: str, env: str, run_id: str, data: pa.Table) -> Path:
    """Land one table atomically: write a temporary file, then link it into place."""
    schema = file_schema(table)
    # The lake adds these two; the task provides every other declared column, by name.
    declared = pa.schema([f for f in schema if f.name not in ("run_id", "schema_version")])
    unknown = sorted(set(data.column_names) - set(declared.names))
    missing = sorted(set(declared.names) - set(data.column_names))
    if unknown or missing:
        raise ValueError(f"table {table!r}: unknown columns {unknown}, missing columns {missing}")
    data = data.select(declared.names).cast(declared)
    n = data.num_rows
    data = data.add_column(0, "schema_version", pa.array([SCHEMA_VERSION] * n, pa.int16()))
    data = data.add_column(0, "run_id", pa.array([run_id] * n, pa.string()))
    data = data.select(schema.names).replace_schema_metadata(
        {"yardstick.schema_version": str(SCHEMA_VERSION), "yardstick.table": table}
    )
    final = file_path(Path(lake_dir), table, env, run_id)
    conflict = f"{final} already exists; the lake never overwrites a run's data"
    if final.exists():
        raise LakeConflict(conflict)
    final.parent.mkdir(parents=True, exist_ok=True)
    # The temporary name does not end in .parquet, so readers never glob a half file.
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(2)}")
    try:
        pq.write_table(data, tmp, compression="zstd")
        # link() fails if the target appeared meanwhile, unlike rename(): no overwrite.
        os.link(tmp, final)
    except FileExistsError:
        raise LakeConflict(conflict) from None
    finally:
        tmp.unlink(missing_ok=True)
    return final
