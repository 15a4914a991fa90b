"""The warehouse: a DuckDB file rebuilt from the lake alone by running sql/*.sql in name order."""

from __future__ import annotations

import os
import secrets
from importlib import resources
from pathlib import Path

import duckdb

from yardstick.schemas import TABLES, file_schema


def sql_files() -> list[tuple[str, str]]:
    """(name, text) of every model in sql/, in the order they run."""
    folder = resources.files("yardstick.sql")
    models = [item for item in folder.iterdir() if item.name.endswith(".sql")]
    return [(item.name, item.read_text()) for item in sorted(models, key=lambda i: i.name)]


def _quote(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _load_raw(con: duckdb.DuckDBPyConnection, lake_dir: Path, table: str) -> None:
    """Create raw_<table> with every declared column, then append the lake's files by name."""
    empty = file_schema(table).empty_table()  # noqa: F841 - read by DuckDB's replacement scan
    con.execute(
        f"create table raw_{table} as "
        f"select *, null::varchar as env, null::date as date from empty"
    )
    if not any((lake_dir / table).glob("env=*/date=*/*.parquet")):
        return
    pattern = _quote(str(lake_dir / table / "env=*" / "date=*" / "*.parquet"))
    # Files written under an older schema lack newer columns: by-name insert leaves them null.
    con.execute(
        f"insert into raw_{table} by name "
        f"select * from read_parquet({pattern}, hive_partitioning = true, "
        f"union_by_name = true, hive_types = {{'env': varchar, 'date': date}})"
    )


def build(lake_dir: str | Path, warehouse_path: str | Path) -> Path:
    """Rebuild the warehouse from scratch and swap it into place atomically."""
    lake_dir, warehouse_path = Path(lake_dir), Path(warehouse_path)
    warehouse_path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per build: two builds in one process (threads) must not share a file.
    tmp = warehouse_path.with_name(
        f".{warehouse_path.name}.building-{os.getpid()}-{secrets.token_hex(3)}"
    )
    # One thread: parallel aggregation sums floats in a varying order, and the same lake
    # must give the same figures to the last bit (stddev, means) on every rebuild.
    con = duckdb.connect(str(tmp), config={"threads": 1})
    try:
        for table in TABLES:
            _load_raw(con, lake_dir, table)
        for name, text in sql_files():
            try:
                con.execute(text)
            except duckdb.Error as exc:
                raise RuntimeError(f"sql/{name}: {exc}") from exc
        con.execute("checkpoint")
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
        raise
    con.close()
    os.replace(tmp, warehouse_path)
    return warehouse_path


def connect_read_only(warehouse_path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open the warehouse for queries; only build() ever opens it for writing."""
    path = Path(warehouse_path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no warehouse yet (run `yardstick run` or `yardstick report`)"
        )
    return duckdb.connect(str(path), read_only=True)
