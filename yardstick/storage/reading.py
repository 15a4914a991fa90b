"""The warehouse read: a read-only connection and the queries the CLI asks of it.

Light on purpose: `trend`, `changes` and `check` answer from here without loading what updates
the warehouse (yardstick/storage/warehouse.py brings the lake's Delta code on import), and the
update reads through the same connection, so there is one of each."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb

from yardstick.storage import dbt  # the warehouse's lock; dbt itself loads only for a build

LAYERS = ("reports", "marts", "staging", "raw", "yardstick")
META = "yardstick.meta"  # key/value: models digest, schema version, update state


def quote(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The warehouse's meta table as a dict (empty when it has none)."""
    try:
        return dict(con.execute(f"select key, value from {META}").fetchall())
    except duckdb.CatalogException:
        return {}


def use_layers(con: duckdb.DuckDBPyConnection) -> None:
    """Let `con` name the warehouse's relations without their schema (`figures` for
    marts.figures): its search path is the layers this warehouse has, reports first."""
    existing = {
        name
        for (name,) in con.execute(
            "select schema_name from duckdb_schemas() where database_name = current_database()"
        ).fetchall()
    }
    # DuckDB refuses a search path naming a schema that does not exist.
    path = [schema for schema in LAYERS if schema in existing] + ["main"]
    con.execute(f"set search_path = {quote(','.join(path))}")


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

    def __enter__(self) -> ReadConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_lock", None) is not None:
            self.close()


def connect_read_only(warehouse_path: str | Path, who: str | None = None) -> ReadConnection:
    """Open the warehouse for queries; only updates ever open it for writing. The connection
    holds the warehouse's shared lock until closed: an update of another run waits for it
    (DuckDB would refuse its write), and this waits for an update in progress.
    FileNotFoundError, one line, when there is none."""
    path = Path(warehouse_path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no warehouse yet (run `yardstick run` or `yardstick report`)"
        )
    lock = dbt.locked(path, shared=True, who=who)
    lock.__enter__()
    try:
        con = duckdb.connect(str(path), read_only=True)
        use_layers(con)
        if meta(con).get("lake", "").startswith("s3://"):
            # The detail views read an S3 lake in place (s3fs: imported only for one).
            from yardstick.storage import lakefs

            lakefs.register(con)
    except BaseException:
        lock.__exit__(None, None, None)
        raise
    return ReadConnection(con, lock)


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


# --- what the CLI asks ------------------------------------------------------------------------


def records(con, sql: str, parameters: list) -> list[dict]:
    """The rows of a query as {column: value}, whatever columns it returns."""
    cursor = con.execute(sql, parameters)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _column(con, sql: str, parameters: list | None = None) -> list:
    """The first column of a query's rows."""
    return [row[0] for row in con.execute(sql, parameters or []).fetchall()]


def measured_envs(con) -> list[str]:
    """Every environment with a run in the warehouse."""
    return _column(con, "select distinct env from runs")


def figure_names(con) -> list[str]:
    """Every figure of the catalog."""
    return _column(con, "select figure from figure_catalog")


def figure_subjects(con, env: str, figure: str) -> list[str]:
    """The subjects (cell, command, prefix) a figure has on an environment."""
    return _column(
        con,
        "select distinct subject from figure_trends where env = ? and figure = ?",
        [env, figure],
    )


def figure_history(con, env: str, figure: str, subject: str, since_day: date) -> list[tuple]:
    """A figure's points since a day, oldest first: (started_at, run_id, value, unit, nature,
    n, min, max, server, environment_changed, noisy, rolling_median, series_started,
    previous_profile, profile, series)."""
    return con.execute(
        "select started_at, run_id, value, unit, nature, n, min_value, max_value,"
        " concat_ws(' ', case server_product when 'valkey' then 'Valkey' when 'redis' then 'Redis'"
        " else server_product end, coalesce(server_version, redis_version)),"
        " environment_changed, noisy, rolling_median, series_started, previous_profile, profile,"
        " series from figure_trends"
        " where env = ? and figure = ? and subject = ? and started_at::date >= ?"
        " order by started_at, run_id",
        [env, figure, subject, since_day],
    ).fetchall()


def latest_verdict(con, env: str, figure: str, subject: str) -> tuple | None:
    """(verdict, change_share, noise_share) of a figure's latest run, None without one."""
    return con.execute(
        "select verdict, change_share, noise_share from changes"
        " where env = ? and figure = ? and subject = ?",
        [env, figure, subject],
    ).fetchone()


def full_run_envs(con) -> list[str]:
    """The environments whose latest run is a full one (what `changes` judges)."""
    return _column(con, "select env from latest_full_runs")


def verdict_summaries(con, envs: list[str]) -> list[dict]:
    """Each environment's verdict line: judged, noisy and new figure counts."""
    return records(con, "select * from verdicts where env in ? order by env", [envs])


def judged_changes(con, envs: list[str], with_steady: bool) -> list[dict]:
    """Tonight's changes, regressions first; steady and new figures only when asked."""
    hidden = "" if with_steady else " and verdict not in ('steady', 'new')"
    return records(
        con,
        f"select * from changes where env in ?{hidden} order by env, case verdict"
        " when 'regression' then 0 when 'improvement' then 1 else 2 end, verdict, figure,"
        " subject",
        [envs],
    )


def change_columns(con) -> list[str]:
    """The columns judged_changes returns: an empty CSV still has its header."""
    return [d[0] for d in con.execute("select * from changes limit 0").description]


def crashed_runs(con, envs: list[str]) -> list[dict]:
    """Runs of these environments that crashed, by run."""
    return records(con, "select * from crashed_runs where env in ? order by env, run_id", [envs])


def change_evidence(con, envs: list[str]) -> dict[tuple[str, str, str], str]:
    """The evidence sentence of each changed figure, by (env, figure, subject)."""
    rows = con.execute(
        "select env, figure, subject, evidence from report_changes where env in ?", [envs]
    ).fetchall()
    return {(env, figure, subject): evidence for env, figure, subject, evidence in rows}


def change_causes(con, envs: list[str]) -> dict[tuple[str, str, str], tuple[str, list[dict]]]:
    """The likely causes of each regression and improvement, by (env, figure, subject): their
    line ("likely: …" or "nothing else moved") and their list, top first."""
    rows = con.execute(
        "select env, figure, subject, causes, cause_list from report_change_causes where env in ?",
        [envs],
    ).fetchall()
    return {
        (env, figure, subject): (line, list(items or []))
        for env, figure, subject, line, items in rows
    }
