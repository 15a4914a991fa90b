"""The lake format of the tool before Delta Lake (for the migration tests): one Parquet file
per table, environment and run, `lake/<table>/env=<env>/period=<YYYY-MM>/<run_id>.parquet`,
and compacted files whose footer names the files they replace. Written here as the earlier
`yardstick/storage/delta.py` wrote it; the tool itself only reads it (storage/migrate.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from yardstick.storage import delta
from yardstick.storage.schemas import SCHEMA_VERSION, file_schema


def file_path(lake_dir: Path, table: str, env: str, run_id: str) -> Path:
    """Where the earlier format put one run's file."""
    period = delta.run_period(run_id)
    return Path(str(lake_dir)) / table / f"env={env}" / f"period={period}" / f"{run_id}.parquet"


def write(lake_dir, table: str, env: str, run_id: str, data: pa.Table) -> Path | None:
    """delta.write of the earlier format (a file per run; none for no rows)."""
    prepared = delta.prepare(table, env, run_id, data).drop_columns(["env", "period"])
    if prepared.num_rows == 0:
        return None
    final = file_path(lake_dir, table, env, run_id)
    final.parent.mkdir(parents=True, exist_ok=True)
    meta = {"yardstick.schema_version": str(SCHEMA_VERSION), "yardstick.table": table}
    pq.write_table(prepared.replace_schema_metadata(meta), final)
    return final


def compact_partition(lake_dir, table: str, env: str, period: str, keep_inputs: bool) -> Path:
    """Merge one partition's files into compacted-g000001.parquet as the earlier compaction
    did; `keep_inputs`: killed after its commit, before deleting what it replaced."""
    folder = Path(str(lake_dir)) / table / f"env={env}" / f"period={period}"
    inputs = sorted(folder.glob("*.parquet"))
    merged = pa.concat_tables([pq.read_table(p).select(file_schema(table).names) for p in inputs])
    meta = {
        "yardstick.schema_version": str(SCHEMA_VERSION),
        "yardstick.table": table,
        "yardstick.runs": json.dumps(sorted(set(merged["run_id"].to_pylist()))),
        "yardstick.replaces": json.dumps(
            sorted(str(p.relative_to(folder.parents[1])) for p in inputs)
        ),
    }
    final = folder / "compacted-g000001.parquet"
    pq.write_table(merged.replace_schema_metadata(meta), final)
    if not keep_inputs:
        for p in inputs:
            p.unlink()
    return final
