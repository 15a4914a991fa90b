"""What one warehouse's dbt work leaves for the next: the empty warehouse a full build starts
from, and the recorded plan of an incremental update, each kept in the dbt cache under the key
it is valid for (yardstick/storage/plan.py: the models' digest, dbt's and DuckDB's versions, the
arguments, the database name and every relation's columns).

A new warehouse (a first run, `yardstick report`, every test) then starts no dbt at all: it
copies the empty warehouse built for the same key and replays the plan recorded for the same
key, as the second update of one warehouse already does. Files are written under a temporary
name and renamed, so a reader sees a whole file or none; the newest few of each are kept."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from yardstick.storage import dbt
from yardstick.storage.plan import Statement

log = logging.getLogger(__name__)

KEEP = 6  # files of each kind kept: the versions and database names in use on one machine


def _folder(kind: str) -> Path:
    return dbt.cache_root() / kind


def _put(target: Path, write) -> None:
    """Write `target` through a temporary file and a rename; the oldest beyond KEEP go."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as exc:  # a full disk: the next warehouse runs dbt, nothing worse
        log.info("dbt cache: %s not kept (%s)", target.name, exc)
        tmp.unlink(missing_ok=True)
        return
    kept = sorted(
        (p for p in target.parent.glob(f"*{target.suffix}") if not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
    for old in kept[:-KEEP]:
        old.unlink(missing_ok=True)


def template(key: str) -> Path | None:
    """The empty warehouse a full build made for `key`, if one is kept."""
    path = _folder("templates") / f"{key}.duckdb"
    return path if path.is_file() else None


def keep_template(built: Path, key: str) -> None:
    """Keep a copy of `built`, a full build of an empty batch (checkpointed, closed)."""
    _put(_folder("templates") / f"{key}.duckdb", lambda tmp: shutil.copyfile(built, tmp))


def forget_template(key: str) -> None:
    """Drop a kept template that did not open."""
    (_folder("templates") / f"{key}.duckdb").unlink(missing_ok=True)


def plan(key: str) -> list[Statement] | None:
    """The incremental plan recorded for `key` by any warehouse, if one is kept."""
    path = _folder("plans") / f"{key}.json"
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return [Statement(node, sql) for node, sql in rows] or None


def keep_plan(statements: list[Statement], key: str) -> None:
    """Keep a recorded incremental plan for the next warehouse of the same key."""
    text = json.dumps([[s.node, s.sql] for s in statements])
    _put(_folder("plans") / f"{key}.json", lambda tmp: tmp.write_text(text))
