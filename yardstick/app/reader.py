"""The warehouse opened read-only for the CLI's listings (`trend`, `changes`, `check`), without
importing what updates it: yardstick/storage/warehouse.py loads the lake's Delta code and the
families' schemas (and with them Prefect) on import, seconds before a listing could answer.
Same lock and search path as its connect_read_only."""

from __future__ import annotations

from pathlib import Path

import duckdb

from yardstick.storage import dbt  # the warehouse's lock; dbt itself loads only for a build

# As in yardstick/storage/warehouse.py (tests/test_cli_light.py keeps them equal).
LAYERS = ("reports", "marts", "staging", "raw", "yardstick")
META = "yardstick.meta"


class ReadConnection:
    """A read-only DuckDB connection that releases the warehouse's shared lock on close."""

    def __init__(self, con: duckdb.DuckDBPyConnection, lock) -> None:
        self._con = con
        self._lock = lock

    def __getattr__(self, name: str):
        return getattr(self._con, name)

    def close(self) -> None:
        """Close the connection, then release the lock."""
        lock, self._lock = self._lock, None
        try:
            self._con.close()
        finally:
            if lock is not None:
                lock.__exit__(None, None, None)


def connect_read_only(warehouse_path: str | Path) -> ReadConnection:
    """Open the warehouse for queries, its relations named without their schema; the shared
    lock is held until closed (an update of another run waits for it, and this waits for an
    update in progress). FileNotFoundError, one line, when there is none."""
    path = Path(warehouse_path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no warehouse yet (run `yardstick run` or `yardstick report`)"
        )
    lock = dbt.locked(path, shared=True)
    lock.__enter__()
    try:
        con = duckdb.connect(str(path), read_only=True)
        existing = {
            name
            for (name,) in con.execute(
                "select schema_name from duckdb_schemas() where database_name = current_database()"
            ).fetchall()
        }
        # DuckDB refuses a search path naming a schema that does not exist.
        search = ",".join([schema for schema in LAYERS if schema in existing] + ["main"])
        con.execute("set search_path = '" + search.replace("'", "''") + "'")
        if _meta(con).get("lake", "").startswith("s3://"):
            # The detail views read an S3 lake in place (s3fs: imported only for one).
            from yardstick.storage import lakefs

            lakefs.register(con)
    except BaseException:
        lock.__exit__(None, None, None)
        raise
    return ReadConnection(con, lock)


def _meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The warehouse's meta table as a dict (empty when it has none)."""
    try:
        return dict(con.execute(f"select key, value from {META}").fetchall())
    except duckdb.CatalogException:
        return {}


def recorded_lake(warehouse: Path) -> str | None:
    """The lake the warehouse was last updated from (None without one, or when unreadable)."""
    if not warehouse.is_file():
        return None
    try:
        con = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error:
        return None
    try:
        row = con.execute(f"select value from {META} where key = 'lake'").fetchone()
    except duckdb.Error:
        return None
    finally:
        con.close()
    return row[0] if row else None
