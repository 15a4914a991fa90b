"""The lake checked against its own log: commits a crash damaged, and runs whose data files
are there though no commit names them.

A Delta table's state is its `_delta_log`: a commit file deleted, or left empty by a crash
(never fsynced), makes its rows vanish without an error (delta-rs reads an empty commit as
none, and a missing newest one as a shorter log), and a missing commit that a checkpoint
covers makes every later append fail ("Invalid table version"). Here each table's log is
listed, and data files are matched with the current version:

- a damaged commit that a checkpoint covers, or the newest one, is repaired: its file gets a
  placeholder commit (the checkpoint, or nothing, holds its state), and the data files no
  commit names, of runs the table does not hold, are added back in one new commit (rows
  never doubled: a run the table holds is never added again);
- a damaged commit before later ones may have held more than files (a schema change, a
  compaction's removals): it is repaired only when asked, `yardstick lake repair`.

Files younger than ORPHAN_AGE_S are left alone (a landing writes its file, then commits)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq

from yardstick.storage import delta, lakefs
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import DETAIL_TABLES, TABLES

# A data file no commit names is a lost commit's only once its writer is surely done.
ORPHAN_AGE_S = 60.0
REPAIR_COMMAND = "yardstick lake repair --lake {lake}"


@dataclass
class TableDamage:
    """What one table's log and files say is wrong."""

    table: str
    placeholders: list[int] = field(default_factory=list)  # safe: covered, or the newest
    middle: list[int] = field(default_factory=list)  # damaged before later commits
    lost_runs: list[tuple[str, str]] = field(default_factory=list)  # (env, run) not in it
    orphans: list[Path] = field(default_factory=list)  # their files, to add back
    unreadable: str | None = None  # the table cannot be read at all

    @property
    def damaged(self) -> bool:
        """Whether anything is wrong."""
        return bool(self.placeholders or self.middle or self.lost_runs or self.unreadable)


def _commits(log: Path) -> tuple[dict[int, Path], set[int]]:
    """The commit files (version -> path) and checkpoint versions of a table's log."""
    commits: dict[int, Path] = {}
    checkpoints: set[int] = set()
    for name in os.listdir(log):
        stem = name.split(".", 1)[0]
        if not stem.isdigit():
            continue
        if name.endswith(".json") and name.count(".") == 1:
            commits[int(stem)] = log / name
        elif ".checkpoint." in name:
            checkpoints.add(int(stem))
    return commits, checkpoints


def _readable(path: Path) -> bool:
    """Whether a commit file holds actions (an empty or cut file holds none)."""
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        return bool(lines) and all(isinstance(json.loads(line), dict) for line in lines)
    except (OSError, ValueError):
        return False


def check_table(
    lake: Lake, table: str, now: float | None = None, files: bool = True
) -> TableDamage:
    """One table's log and data files against each other (a local lake); its log alone
    with `files=False` (no data file read: what a collection every 5 minutes can afford)."""
    now = time.time() if now is None else now
    found = TableDamage(table)
    root = lake.folder / table
    log = root / "_delta_log"
    if not log.is_dir():
        return found
    commits, checkpoints = _commits(log)
    if not commits and not checkpoints:
        return found
    newest = max([*commits, *checkpoints])
    covered = max(checkpoints, default=-1)
    for version in range(covered if covered >= 0 else 0, newest + 1):
        path = commits.get(version)
        if path is not None and _readable(path):
            continue
        if version == 0 and covered < 0:
            found.middle.append(0)  # the table's creation (its schema): never replaced
        elif version <= covered or version == newest:
            found.placeholders.append(version)
        else:
            found.middle.append(version)
    if not files or 0 in found.middle or any(v not in commits for v in found.middle):
        return found  # a gap, or no first commit: delta-rs cannot read it (and says so)
    try:
        # An empty commit reads as none: its runs are found (and named) all the same.
        _lost_files(lake, table, root, found, now)
    except (OSError, ValueError) as exc:
        found.unreadable = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return found


def _lost_files(lake: Lake, table: str, root: Path, found: TableDamage, now: float) -> None:
    """Data files on disk that the current version does not name, old enough, holding only
    runs the table does not hold: a lost commit's (found.orphans, found.lost_runs)."""
    if table in DETAIL_TABLES:
        return  # retention deletes their runs' rows: a leftover file is no lost commit
    named = {os.path.normpath(unquote(str(f.path))) for f in delta.data_files(lake, table)}
    candidates = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "_delta_log" and not d.startswith(".")]
        for name in names:
            path = Path(folder) / name
            if not _delta_data_file(path, root):
                continue
            if os.path.normpath(str(path)) in named:
                continue
            if now - path.stat().st_mtime >= ORPHAN_AGE_S:
                candidates.append(path)
    if not candidates:
        return
    envs = sorted({_partition(p, root)["env"] for p in candidates})
    held = delta.read(lake, table, envs, columns=["env", "run_id"])
    have = set(zip(held["env"].to_pylist(), held["run_id"].to_pylist(), strict=True))
    for path in candidates:
        env = _partition(path, root)["env"]
        runs = {(env, run) for run in pq.read_table(path, columns=["run_id"])["run_id"].to_pylist()}
        if runs and not runs & have:
            found.orphans.append(path)
            found.lost_runs.extend(sorted(runs - set(found.lost_runs)))


def _delta_data_file(path: Path, root: Path) -> bool:
    """Whether a file is one delta-rs writes (part-….parquet under env=…/period=…): a lake of
    the earlier format keeps its own files beside them until migrated (never added back)."""
    folders = path.relative_to(root).parts[:-1]
    return (
        path.name.startswith("part-")
        and path.name.endswith(".parquet")
        and len(folders) == 2
        and folders[0].startswith("env=")
        and folders[1].startswith("period=")
    )


def _partition(path: Path, root: Path) -> dict[str, str]:
    """The partition values of a data file, from its folders (env=…/period=…)."""
    values = {}
    for part in path.relative_to(root).parts[:-1]:
        key, _, value = part.partition("=")
        values[key] = unquote(value)
    return values


def check(lake: Lake, tables: list[str] | None = None, files: bool = True) -> list[TableDamage]:
    """Every table's damage (tables with none left out); an S3 lake is not checked here."""
    if lake.remote or not lake.folder.is_dir():
        return []
    found = (check_table(lake, t, files=files) for t in tables or list(TABLES))
    return [d for d in found if d.damaged]


def check_and_repair(lake: Lake, files: bool = True) -> tuple[list[str], list[str]]:
    """Check every table and repair what is safe: (what was repaired, what was refused with
    the command that repairs it), one line per table. A lake that cannot be listed is
    skipped (the run's own steps say why it cannot be written)."""
    try:
        return repair(lake, check(lake, files=files))
    except Exception as exc:  # a check that fails must not cost the night its measurements
        said = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return [], [f"lake {lake}: its log not checked ({said.splitlines()[0] if said else exc})"]


def repair(
    lake: Lake, damages: list[TableDamage], middle_too: bool = False
) -> tuple[list[str], list[str]]:
    """Repair what is safe (the middle of a log too with `middle_too`, as `yardstick lake
    repair` asks): (one line per table saying what was done, one per table saying what is
    left and the command that does it)."""
    lines: list[str] = []
    refused: list[str] = []
    for damage in damages:
        where = f"lake {lake}: table {damage.table}"
        if damage.unreadable:
            refused.append(f"{where}: not checked ({damage.unreadable})")
            continue
        if damage.middle and 0 in damage.middle:
            refused.append(f"{where}: its first commit is lost or empty; it cannot be repaired")
            continue
        if damage.middle and not middle_too:
            runs = f" ({_runs(damage.lost_runs)})" if damage.lost_runs else ""
            refused.append(
                f"{where}: commit(s) {_versions(damage.middle)} damaged (missing or empty) "
                f"before later commits; their runs{runs} are not read. Not repaired automatically "
                "(such a commit may also have changed the schema or removed files); "
                f"run `{REPAIR_COMMAND.format(lake=lake)}`"
            )
            continue
        placed = sorted(damage.placeholders + damage.middle)
        for version in placed:
            _placeholder(lake.folder / damage.table / "_delta_log", version)
        if damage.middle:  # the table could not be read: its lost files are found now
            again = check_table(lake, damage.table)
            damage.orphans, damage.lost_runs = again.orphans, again.lost_runs
        said = []
        if placed:
            said.append(f"commit(s) {_versions(placed)} damaged (missing or empty): replaced")
        if damage.orphans:
            _add_back(lake, damage.table, damage.orphans)
            said.append(
                f"{len(damage.lost_runs)} run(s) whose files no commit named added back "
                f"({_runs(damage.lost_runs)})"
            )
        if said:
            lines.append(f"{where}: " + "; ".join(said))
    return lines, refused


def _versions(versions: list[int]) -> str:
    return ", ".join(str(v) for v in versions)


def _runs(runs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{env}/{run}" for env, run in runs)


def _placeholder(log: Path, version: int) -> None:
    """A commit holding only its commitInfo in the place of a damaged one (written under a
    temporary name, fsynced, then renamed: never a half file)."""
    info = {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": "yardstick lake repair",
            "operationParameters": {"replaces": "a commit found missing or empty"},
        }
    }
    final = log / f"{version:020d}.json"
    tmp = log / f".{final.name}.repair-{os.getpid()}"
    with open(tmp, "w") as out:
        out.write(json.dumps(info) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, final)


def _add_back(lake: Lake, table: str, files: list[Path]) -> None:
    """One commit adding the files back, with their run_id range as statistics."""
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction

    root = lake.folder / table
    actions = []
    for path in files:
        data = pq.read_table(path, columns=["run_id"])
        runs = data["run_id"].to_pylist()
        stat = path.stat()
        stats = {
            "numRecords": data.num_rows,
            "minValues": {"run_id": min(runs)},
            "maxValues": {"run_id": max(runs)},
            "nullCount": {"run_id": 0},
        }
        actions.append(
            AddAction(
                str(path.relative_to(root)),
                stat.st_size,
                _partition(path, root),
                int(stat.st_mtime * 1000),
                True,
                json.dumps(stats),
            )
        )
    dt = lake.table(table)
    with lakefs.storage_errors("repair commit", lake.path(table)):
        dt.create_write_transaction(
            actions,
            mode="append",
            schema=dt.schema(),
            partition_by=delta.PARTITION_BY,
            commit_properties=CommitProperties(
                custom_metadata={"yardstick.landing": f"repair: {len(files)} files added back"}
            ),
        )
