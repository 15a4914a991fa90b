"""Collection cursors: what the lake already holds of an environment's SLOWLOG and LATENCY
HISTORY, so that a collection lands only what is new (tasks/base.Landed).

What has landed is the truth, not a process's memory: a collection is a process of its own
every 5 minutes, servers restart, a site's machine is replaced. The cursors come from one run
per table: the newest run with a row in it that is

- complete (its `runs` row has landed, as a landed file or in a compacted file's footer): a
  collection killed after landing its entries but before its runs row is never loaded by the
  warehouse, so a cursor moved by it would leave those entries out for good;
- started before the collecting run (its run id sorts lower): the warehouse loads runs in
  run-id order (a nightly update holds back runs started after it; a run older than what is
  loaded rebuilds), so every run a cursor relied on is loaded no later than the run that used
  it. A collection landed during a long nightly run is re-landed by that run instead.

One run's rows suffice: each family lands its detail before the row its cursor is read from
(slowlog_entries before slowlog_collections, latency_history before latency_latest), and every
run before it took its own cursor by the same rule. A cursor older than the truth only lands
rows again (the SQL deduplicates them); none newer than the truth can be read.

Cheap, as a collection must be: the newest period first (two at most: a month boundary), file
names before any file is opened, one small file read per table (a compacted one only when no
newer run landed a file of its own). A lake that cannot be read gives an empty Landed: land
everything once, say so in the step."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

import pyarrow as pa

from yardstick.storage import lake, lakefs
from yardstick.storage.lakefs import LakePath
from yardstick.tasks.base import Landed

log = logging.getLogger(__name__)

# Period folders read per table, newest first: a month boundary needs the one before.
PERIODS_READ = 2
# A file listed then deleted by a compaction before it was read: one more attempt.
ATTEMPTS = 2


def reader(lake_dir: str | LakePath, before_run_id: str) -> Callable[[str], Landed]:
    """Environment name -> what the lake holds of its collections (complete runs started
    before `before_run_id`), read once per environment: the run's families share it."""
    read: dict[str, Landed] = {}

    def landed(env: str) -> Landed:
        """What the lake holds of `env`'s collections."""
        found = read.get(env)
        if found is None:
            # Without a lock: one environment is collected by one thread at a time.
            found = read.setdefault(env, read_landed(lake_dir, env, before_run_id))
        return found

    return landed


def read_landed(lake_dir: str | LakePath, env: str, before_run_id: str) -> Landed:
    """The SLOWLOG and LATENCY HISTORY cursors of one environment; an empty Landed (with the
    reason) when the lake cannot be read."""
    for attempt in range(ATTEMPTS):
        try:
            return _read(lakefs.lake_root(lake_dir), env, before_run_id)
        except FileNotFoundError:
            if attempt + 1 < ATTEMPTS:
                continue  # a compaction replaced a file between listing and reading
            problem = "a lake file vanished while read"
        except Exception as exc:  # a collection still lands, everything, rather than nothing
            problem = _one_line(exc)
        log.warning("%s: collection cursors unreadable (%s): landing everything", env, problem)
        return Landed(problem=f"lake cursors unreadable ({problem}): everything read was landed")
    raise AssertionError("unreachable")  # the loop returns


def _one_line(exc: BaseException) -> str:
    """An exception as one line: its type and first line of text."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read(root: LakePath, env: str, before_run_id: str) -> Landed:
    """Landed from the newest complete run of each cursor table."""
    complete: dict[str, set[str]] = {}

    def complete_in(period: str) -> set[str]:
        """Runs of `env` in `period` whose runs row has landed (listed once)."""
        if period not in complete:
            complete[period] = _complete_runs(root, env, period)
        return complete[period]

    slowlog = _newest_rows(root, "slowlog_collections", env, before_run_id, complete_in)
    latency = _newest_rows(root, "latency_latest", env, before_run_id, complete_in)
    ids: dict[str, int] = {}
    for row in slowlog[1] if slowlog else []:
        # The highest id landed: the newest queued (everything above the cursor landed),
        # else the cursor it kept (an empty queue); files before these columns have none.
        known = [
            v for v in (row.get("newest_queued_id"), row.get("landed_above_id")) if v is not None
        ]
        if known and row.get("server_run_id") is not None:
            run = row["server_run_id"]
            ids[run] = max(ids.get(run, max(known)), max(known))
    at: dict[tuple[str, str], datetime] = {}
    for row in latency[1] if latency else []:
        newest = row.get("history_newest_at")  # null: no history read (or an older file)
        if newest is not None:
            key = (row["server_run_id"], row["event"])
            at[key] = max(at.get(key, newest), newest)
    return Landed(
        slowlog_ids=ids,
        latency_at=at,
        slowlog_run_id=slowlog[0] if slowlog else None,
        latency_run_id=latency[0] if latency else None,
    )


def _complete_runs(root: LakePath, env: str, period: str) -> set[str]:
    """Runs whose `runs` row is in `period`'s folder: a landed file, or a compacted file's
    footer (a file it replaced names the same runs)."""
    folder = root / "runs" / f"env={env}" / f"period={period}"
    names = lakefs.list_names(folder)
    runs = {run for name in names if (run := lake.landed_run_id(name))}
    for name in names:
        if _compacted(name):
            runs.update(lake.read_footer(folder / name)[0])
    return runs


def _compacted(name: str) -> bool:
    """A compacted file's name (not a hidden temporary one)."""
    return name.startswith(lake.COMPACTED_PREFIX) and name.endswith(".parquet")


def _periods(root: LakePath, table: str, env: str, before_run_id: str) -> list[str]:
    """The newest period folders of `table` for `env` up to the run's own, newest first
    (folders of days, before periods existed, are left out: their runs land everything once)."""
    names = lakefs.list_names(root / table / f"env={env}")
    own = lake.run_period(before_run_id)
    periods = sorted(
        (n.removeprefix("period=") for n in names if n.startswith("period=")), reverse=True
    )
    return [p for p in periods if p <= own][:PERIODS_READ]


def _newest_rows(
    root: LakePath,
    table: str,
    env: str,
    before_run_id: str,
    complete_in: Callable[[str], set[str]],
) -> tuple[str, list[dict]] | None:
    """(run id, rows) of the newest complete run before `before_run_id` with rows in `table`,
    or None: its own landed file if it has one, else the compacted file holding it."""
    for period in _periods(root, table, env, before_run_id):
        complete = complete_in(period)
        if not complete:
            continue
        folder = root / table / f"env={env}" / f"period={period}"
        names = lakefs.list_names(folder)
        landed = {run: folder / name for name in names if (run := lake.landed_run_id(name))}
        wanted = {run for run in landed if run < before_run_id and run in complete}
        newest = max(wanted, default=None)
        holder: LakePath | None = None
        for name in sorted(filter(_compacted, names), reverse=True):
            runs = [
                r for r in lake.read_footer(folder / name)[0] if r < before_run_id and r in complete
            ]
            if runs and (newest is None or max(runs) > newest):
                newest, holder = max(runs), folder / name
        if newest is None:
            continue
        if holder is None:
            return newest, lakefs.read_table(landed[newest]).to_pylist()
        # Imported here: a collection that finds its cursor in a landed file never needs it.
        import pyarrow.compute as pc

        data: pa.Table = lakefs.read_table(holder)
        return newest, data.filter(pc.equal(data["run_id"], newest)).to_pylist()
    return None
