"""dbt's incremental run, recorded once and replayed: the statements dbt ran for each model
(create the batch's rows as a temporary table, then append or delete+insert them into the mart),
kept in the warehouse and executed again by the loader's own connection, in the update's one
transaction, while nothing they depend on has changed.

dbt stays the engine of the models: it compiles them, picks each materialisation's statements
and records them (yardstick/storage/dbt.py, `record=True`); a replay runs exactly those. What it
saves is dbt's start, its parse check and its per-node work (Jinja, metadata queries, one
transaction per node): ~8 CPU-seconds a night whatever the batch. A recorded plan is valid for
one key: the models' digest, dbt's and DuckDB's versions, the arguments, the database name and
the columns of every relation the models read or write (raw, staging, marts). The models' SQL
never asks the database anything while it compiles (no run_query), so the same key gives the
same statements; any change of the key means dbt runs again and records anew."""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from importlib import metadata

import duckdb

from yardstick.interrupt import STOP, Interrupted, stop_reason

PLAN = "yardstick.dbt_plan"  # the recorded statements: seq, node, statement
KEY = "plan_key"  # the meta key (yardstick.meta) of the plan's key
# Statements dbt runs only to decide (metadata queries) or to frame each node's transaction:
# the replay runs inside one transaction of its own and needs none of them.
NOT_REPLAYED = {"select", "with", "begin", "commit", "rollback", "describe", "show", "pragma"}
# Relations whose columns the models depend on; raw's relation kinds are left out (a detail
# table is a view over the lake when the batch has its files, else an empty table).
SCHEMAS = ("raw", "staging", "marts")


@dataclass
class Statement:
    """One recorded statement and the model it belongs to."""

    node: str  # dbt's unique id (model.yardstick.figures)
    sql: str


def _versions() -> str:
    """The versions whose change may change what dbt runs for the same models."""
    names = ("dbt-core", "dbt-duckdb", "duckdb")
    found = []
    for name in names:
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name}=?")
    return ",".join(found)


def key(con: duckdb.DuckDBPyConnection, models_digest: str, args: list[str]) -> str:
    """The key a plan recorded now would be valid for (taken after the batch is loaded)."""
    columns = con.execute(
        "select t.table_schema, t.table_name,"
        " case when t.table_schema = 'raw' then '' else t.table_type end,"
        " c.ordinal_position, c.column_name, c.data_type"
        " from information_schema.tables as t join information_schema.columns as c"
        " using (table_catalog, table_schema, table_name)"
        " where t.table_catalog = current_database() and t.table_schema in"
        f" ({', '.join(repr(s) for s in SCHEMAS)}) order by all"
    ).fetchall()
    database = con.execute("select current_database()").fetchone()[0]
    digest = hashlib.sha256()
    for part in (models_digest, " ".join(args), _versions(), database, repr(columns)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def _first_word(sql: str) -> str:
    """A statement's first keyword, past comments and whitespace, lowercase."""
    text = re.sub(r"/\*.*?\*/", " ", sql, flags=re.S)
    text = re.sub(r"--[^\n]*", " ", text)
    match = re.match(r"\s*\(?\s*([A-Za-z]+)", text)
    return match.group(1).lower() if match else ""


def from_recording(queries: list[tuple[str, str, object]]) -> list[Statement] | None:
    """The replayable statements of a recorded dbt run ((node, sql, bindings) in the order
    run), or None when the run cannot be replayed (a statement with bound parameters)."""
    plan = []
    for node, sql, bindings in queries:
        if not node.startswith("model.") or _first_word(sql) in NOT_REPLAYED:
            continue
        if bindings:
            return None
        plan.append(Statement(node, sql))
    return plan


def save(con: duckdb.DuckDBPyConnection, plan: list[Statement], plan_key: str) -> None:
    """Keep the plan and its key in the warehouse (inside the caller's transaction)."""
    con.execute(f"create or replace table {PLAN} (seq integer, node varchar, statement varchar)")
    con.executemany(
        f"insert into {PLAN} values (?, ?, ?)",
        [(i, s.node, s.sql) for i, s in enumerate(plan)],
    )
    con.execute("delete from yardstick.meta where key = ?", [KEY])
    con.execute("insert into yardstick.meta values (?, ?)", [KEY, plan_key])


def forget(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the plan (a dbt run that recorded nothing replayable)."""
    con.execute(f"drop table if exists {PLAN}")
    con.execute("delete from yardstick.meta where key = ?", [KEY])


def stored(con: duckdb.DuckDBPyConnection, plan_key: str) -> list[Statement] | None:
    """The warehouse's plan if it was recorded for `plan_key`, else None."""
    try:
        found = con.execute("select value from yardstick.meta where key = ?", [KEY]).fetchone()
        if not found or found[0] != plan_key:
            return None
        rows = con.execute(f"select node, statement from {PLAN} order by seq").fetchall()
    except duckdb.CatalogException:
        return None
    return [Statement(node, sql) for node, sql in rows] or None


def replay(con: duckdb.DuckDBPyConnection, plan: list[Statement]) -> list[tuple[str, str, float]]:
    """Run the plan on `con` (inside the caller's transaction); each node with its seconds.
    Each node's temporary tables are dropped once it is done: their memory is the batch's."""
    nodes: list[tuple[str, str, float]] = []
    start, current = time.perf_counter(), None
    for statement in [*plan, Statement("", "")]:
        if statement.node != current:
            if current is not None:
                _drop_temporary(con)
                nodes.append((current, "success", time.perf_counter() - start))
            start, current = time.perf_counter(), statement.node
        if statement.sql:
            if STOP.is_set():
                raise Interrupted(f"{stop_reason()}: warehouse update stopped")
            con.execute(statement.sql)
    return nodes


def _drop_temporary(con: duckdb.DuckDBPyConnection) -> None:
    """Drop this connection's temporary tables."""
    for (name,) in con.execute("select table_name from duckdb_tables() where temporary").fetchall():
        con.execute(f'drop table temp.main."{name}"')
