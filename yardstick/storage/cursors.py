"""Collection cursors: what the lake already holds of an environment's SLOWLOG and LATENCY
HISTORY, so that a collection lands only what is new (yardstick/tasks/base.Landed).

What has landed is the truth, not a process's memory: a collection is a process of its own
every 5 minutes, servers restart, a site's machine is replaced. The cursors come from one run
per table: the newest run with a row in it that is

- complete (its `runs` row has landed: delta.COMPLETES_A_RUN): a collection killed after
  landing its entries but before its runs row is never loaded by the warehouse, so a cursor
  moved by it would leave those entries out for good;
- started before the collecting run (its run id sorts lower): the warehouse loads runs in
  run-id order (a nightly update holds back runs started after it; a run older than what is
  loaded rebuilds), so every run a cursor relied on is loaded no later than the run that used
  it. A collection landed during a long nightly run is re-landed by that run instead.

One run's rows suffice: each family lands its detail before the row its cursor is read from
(slowlog_entries before slowlog_collections, latency_history before latency_latest), and every
run before it took its own cursor by the same rule. A cursor older than the truth only lands
rows again (the SQL deduplicates them); none newer than the truth can be read.

Cheap, as a collection must be: each table's log is replayed once per collection (every
environment's cursors come from the same table versions), and a data file's run_id range in
the log says which runs it may hold. Collections land one file per environment and table, each
holding one run, so the newest complete run is found from the statistics alone: the files of
the environment's newest two periods (a month boundary) are walked newest first, a file is
opened only when its range holds several runs (merged by a compaction) and could still hold
a newer one, and a run counts as complete from a `runs` file of that one run without opening
it. Then the one run's rows are read. A round of 50 environments opens about two small files
per environment, not each of its files of the month. A lake that cannot be read gives an
empty Landed: land everything once, say so in the step."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from yardstick.storage import delta
from yardstick.storage.lakefs import Lake
from yardstick.tasks.base import Landed

log = logging.getLogger(__name__)

# Period folders read per table, newest first: a month boundary needs the one before.
PERIODS_READ = 2
# A file listed then deleted by a compaction before it was read: one more attempt.
ATTEMPTS = 2


def reader(lake: Lake, before_run_id: str) -> Callable[[str], Landed]:
    """Environment name -> what the lake holds of its collections (complete runs started
    before `before_run_id`), read once per environment: the run's families share it."""
    read: dict[str, Landed] = {}
    listing = Listing(lake)

    def landed(env: str) -> Landed:
        """What the lake holds of `env`'s collections."""
        found = read.get(env)
        if found is None:
            # Without a lock: one environment is collected by one thread at a time.
            found = read.setdefault(env, read_landed(lake, env, before_run_id, listing))
        return found

    return landed


class Listing:
    """Each cursor table's data files, read from its log once for a whole collection (every
    environment's cursors come from the same table versions, one log replay per table)."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.files: dict[str, list[delta.LakeFile]] = {}
        self.lock = threading.Lock()

    def of(self, table: str, env: str) -> list[delta.LakeFile]:
        """The table's data files of one environment."""
        with self.lock:
            if table not in self.files:
                self.files[table] = delta.data_files(self.lake, table)
            return [f for f in self.files[table] if f.env == env]

    def forget(self) -> None:
        """Read the logs again (a file listed was gone: a compaction's vacuum meanwhile)."""
        with self.lock:
            self.files.clear()


def read_landed(lake: Lake, env: str, before_run_id: str, listing: Listing | None = None) -> Landed:
    """The SLOWLOG and LATENCY HISTORY cursors of one environment; an empty Landed (with the
    reason) when the lake cannot be read."""
    listing = listing or Listing(lake)
    for attempt in range(ATTEMPTS):
        try:
            return _read(listing, env, before_run_id)
        except FileNotFoundError:
            if attempt + 1 < ATTEMPTS:
                listing.forget()
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


def _read(listing: Listing, env: str, before_run_id: str) -> Landed:
    """Landed from the newest complete run of each cursor table."""
    complete = _Complete(listing.of(delta.COMPLETES_A_RUN, env))
    slowlog = _newest_rows(listing, "slowlog_collections", env, before_run_id, complete)
    latency = _newest_rows(listing, "latency_latest", env, before_run_id, complete)
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


def _runs_in(f: delta.LakeFile, opened: dict[str, frozenset[str]]) -> frozenset[str]:
    """The runs a data file holds: its statistics when they name one run, else its run_id
    column (read once)."""
    if f.min_run and f.min_run == f.max_run:
        return frozenset((f.min_run,))
    if f.path not in opened:
        opened[f.path] = frozenset(delta.run_ids_of(f))
    return opened[f.path]


class _Complete:
    """Whether a run of one environment counts (its `runs` row has landed), from the runs
    files' statistics; a file is opened only when its range holds several runs."""

    def __init__(self, files: list[delta.LakeFile]) -> None:
        self.files = files
        self.opened: dict[str, frozenset[str]] = {}

    def __call__(self, run_id: str) -> bool:
        period = delta.run_period(run_id)
        return any(
            run_id in _runs_in(f, self.opened)
            for f in self.files
            if f.period == period and f.min_run <= run_id <= f.max_run
        )


def _newest_rows(
    listing: Listing,
    table: str,
    env: str,
    before_run_id: str,
    complete: _Complete,
) -> tuple[str, list[dict]] | None:
    """(run id, rows) of the newest complete run before `before_run_id` with rows in `table`
    (in the environment's newest two periods), or None."""
    own = delta.run_period(before_run_id)
    files = [f for f in listing.of(table, env) if f.period <= own and f.min_run < before_run_id]
    periods = set(sorted({f.period for f in files}, reverse=True)[:PERIODS_READ])
    # Newest first by the highest run a file may hold: once that is below the newest complete
    # run found, no later file can hold a newer one.
    files = sorted((f for f in files if f.period in periods), key=lambda f: f.max_run, reverse=True)
    opened: dict[str, frozenset[str]] = {}
    newest: str | None = None
    for f in files:
        if newest is not None and f.max_run < newest:
            break
        for run in sorted(_runs_in(f, opened), reverse=True):
            if newest is not None and run <= newest:
                break
            if run < before_run_id and complete(run):
                newest = run
                break
    if newest is None:
        return None
    holders = [
        f for f in files if f.min_run <= newest <= f.max_run and newest in _runs_in(f, opened)
    ]
    rows = [row for f in holders for row in delta.read_file(f, run_ids={newest}).to_pylist()]
    return newest, rows
