"""Run the SQL models (the dbt project in sql/) on one warehouse file with dbt's Python runner."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from yardstick import locks

log = logging.getLogger(__name__)

# dbt keeps process-wide state (its event manager, adapters): one invocation at a time.
_DBT_LOCK = threading.Lock()

PROFILE = """yardstick:
  target: warehouse
  outputs:
    warehouse:
      type: duckdb
      path: {path}
      threads: 1
      settings:
        threads: {duckdb_threads}
        memory_limit: {memory_limit}
        preserve_insertion_order: true
        storage_compatibility_version: {storage_version}
"""
# The oldest DuckDB whose files the warehouse stays readable by (duckdb-cli 1.5 in the README).
STORAGE_VERSION = "v1.5.0"
MiB = 1 << 20
GiB = 1 << 30


class ModelError(RuntimeError):
    """A model, seed or data test failed: the message names it in one line."""


@dataclass
class DbtResult:
    """What one dbt invocation did: node names with their status and seconds."""

    nodes: list[tuple[str, str, float]] = field(default_factory=list)
    # How dbt came by the project's parse: reused, partial, or a full parse and why.
    parse_mode: str = ""
    # With record=True: every query dbt ran, in order, as (node unique id, sql, bindings).
    queries: list[tuple[str, str, object]] | None = None

    @property
    def seconds(self) -> float:
        """Sum of node execution times."""
        return sum(seconds for _, _, seconds in self.nodes)


def project_dir() -> Path:
    """The dbt project folder (yardstick/sql/ in the source tree, yardstick/sql when installed)."""
    return Path(str(resources.files("yardstick.sql")))


def models_digest() -> str:
    """A digest of every file of the dbt project: a change means a full rebuild."""
    root = project_dir()
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if (
            path.is_file()
            and path.suffix in {".sql", ".yml", ".csv"}
            and "target" not in path.parts
        ):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    """The tool's cache folder for dbt (YARDSTICK_DBT_STATE, else ~/.cache/yardstick/dbt)."""
    return Path(
        os.environ.get("YARDSTICK_DBT_STATE")
        or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "yardstick", "dbt"
        )
    )


def state_dir(warehouse_path: Path) -> Path:
    """Where dbt's profile, target/ and logs/ live for one version of the models and one
    warehouse path: never in sql/ (an installed package is read-only) nor beside the warehouse
    (that folder is the user's). One folder per path, so two warehouses with the same file
    name in two folders never share a parse or a lock; a rebuild passes its final path, so
    the update after it reuses the rebuild's parse."""
    resolved = str(Path(warehouse_path).resolve())
    where = hashlib.sha256(resolved.encode()).hexdigest()[:12]
    return cache_root() / f"{_parse_key(warehouse_path)}{where}"


def _parse_key(warehouse_path: Path) -> str:
    """What a saved parse is good for, as a folder-name prefix: the models, where the project
    lies (dbt's parse holds its absolute paths: another clone's parse reused here seeds
    from that clone's sql/seeds/, or from nothing once it is gone) and the database name."""
    project = hashlib.sha256(str(project_dir().resolve()).encode()).hexdigest()[:8]
    return f"{models_digest()}-{project}-{_database(warehouse_path)}-"


def _database(warehouse_path: Path) -> str:
    """The database name dbt-duckdb gives the file (its stem), as a folder-name part."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", _stem(Path(warehouse_path))) or "db"


def _stem(path: Path) -> str:
    """The database name dbt-duckdb gives a file: its name up to the last suffix."""
    return path.name.rsplit(".", 1)[0] if "." in path.name[1:] else path.name


PARSE_FILE = "partial_parse.msgpack"


def _seed_parse(state: Path, warehouse_path: Path) -> None:
    """Give a new state folder the newest saved parse of the same models, project folder and
    database name.

    dbt's parse depends on the project, the profile (without the path: _parse_ignores_path)
    and the database name, so it is the same for every warehouse of that name; copying it
    spares a new warehouse (each test, a new project) a full parse of ~110 files without
    sharing anything live between warehouses. dbt checks the copy as it checks its own."""
    target = state / "target" / PARSE_FILE
    if target.exists():
        return
    prefix = _parse_key(warehouse_path)
    saved = []
    for other in cache_root().glob(prefix + "*"):
        candidate = other / "target" / PARSE_FILE
        if other != state and candidate.is_file():
            saved.append((candidate.stat().st_mtime, candidate))
    if not saved:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{PARSE_FILE}.{os.getpid()}")
    try:
        shutil.copyfile(max(saved)[1], tmp)
        os.replace(tmp, target)
    except OSError:  # another process removed it meanwhile: a full parse, no harm
        tmp.unlink(missing_ok=True)


def _parse_ignores_path() -> None:
    """Leave the DuckDB file's path out of what decides whether dbt may reuse its parse.

    dbt hashes the connection keys into its partial-parse check, so every new file (each
    test, each temporary rebuild) cost a full parse of ~110 files. Nothing in sql/ reads the
    path; the database name, which the parse does use, stays in the hash."""
    from dbt.adapters.duckdb.credentials import DuckDBCredentials

    if getattr(DuckDBCredentials, "_yardstick_path_ignored", False):
        return
    keys = DuckDBCredentials._connection_keys

    def without_path(self) -> tuple[str, ...]:
        return tuple(key for key in keys(self) if key != "path")

    DuckDBCredentials._connection_keys = without_path
    DuckDBCredentials._yardstick_path_ignored = True


@contextmanager
def locked(warehouse_path: Path, shared: bool = False, who: str | None = None) -> Iterator[None]:
    """Hold the lock of one warehouse, across threads and processes (the kernel releases it
    if the process dies): exclusive for an update or rebuild, shared for a reader (DuckDB
    refuses to open a file another process writes, and to write one another process reads).

    Keyed by the file's resolved path, so two projects' warehouses of the same name never
    wait on each other. A waiter says once whom it waits for (run, pid, what it does)."""
    where = hashlib.sha256(str(Path(warehouse_path).resolve()).encode()).hexdigest()[:12]
    folder = cache_root() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    thread_lock = _lock_for(where)
    if shared and thread_lock._is_owned():  # a reader inside this thread's own update
        yield
        return
    lock = locks.FileLock(
        folder / f"{where}.lock",
        shared=shared,
        what=f"the warehouse {warehouse_path}",
        who=who,
        doing="reading it" if shared else "updating it",
        on_wait=log.warning,
        poll_s=LOCK_POLL_S,
    )
    with ExitStack() as stack:
        if not shared:
            stack.enter_context(thread_lock)
        stack.enter_context(lock)
        yield


LOCK_POLL_S = 0.2


_THREAD_LOCKS: dict[str, threading.RLock] = {}


def _lock_for(key: str) -> threading.RLock:
    """A per-warehouse lock for threads of this process (flock alone does not exclude them)."""
    with _DBT_LOCK:
        return _THREAD_LOCKS.setdefault(key, threading.RLock())


# A state folder unused this long is removed.
STALE_STATE_S = 7 * 86400.0


def _prune_states(state: Path) -> None:
    """Remove state folders (other files, other versions of the models) unused for a week."""
    if not state.parent.is_dir():
        return
    now = time.time()
    for other in state.parent.iterdir():
        if other == state or not other.is_dir() or other.name == "locks":
            continue
        try:
            if now - (other / ".lock").stat().st_mtime > STALE_STATE_S:
                shutil.rmtree(other, ignore_errors=True)
        except FileNotFoundError:
            pass


@contextmanager
def _exclusive(state: Path) -> Iterator[None]:
    """One dbt invocation per state folder at a time, across threads and processes."""
    if not state.exists():
        _prune_states(state)
    state.mkdir(parents=True, exist_ok=True)
    (state / ".lock").touch()  # marks this folder as in use
    with _DBT_LOCK, locks.FileLock(state / ".lock", doing="running dbt on it"):
        yield


def memory_limit_bytes() -> int:
    """DuckDB's memory bound for the warehouse (YARDSTICK_DUCKDB_MEMORY_MB, else a quarter of
    the machine's memory, between 512 MiB and 1 GiB): beyond it DuckDB spills to a temporary
    folder beside the file, so a rebuild's peak does not follow the history's length."""
    asked = os.environ.get("YARDSTICK_DUCKDB_MEMORY_MB")
    if asked:
        return int(float(asked) * MiB)
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        total = 4 * GiB
    try:  # a container's own bound, when lower (cgroup v2)
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if text.isdigit():
            total = min(total, int(text))
    except OSError:
        pass
    return max(512 * MiB, min(GiB, total // 4))


def duckdb_settings(threads: int | None = None) -> dict[str, object]:
    """The DuckDB settings of every connection that writes the warehouse (the loader's and
    dbt's must agree: DuckDB refuses a second configuration of an open file)."""
    return {
        "threads": threads or os.cpu_count() or 1,
        "memory_limit": f"{memory_limit_bytes() // MiB}MiB",
        "preserve_insertion_order": True,
        # Written in a storage format the duckdb CLI from the package registry reads
        # (duckdb-cli 1.5.x refuses duckdb 2.0's default: "version number 69").
        "storage_compatibility_version": STORAGE_VERSION,
    }


def run(
    warehouse_path: Path,
    args: list[str],
    duckdb_threads: int | None = None,
    project: Path | None = None,
    state_for: Path | None = None,
    record: bool = False,
) -> DbtResult:
    """Invoke dbt (`build`, `run`, `test`, ...) on `warehouse_path`; raise ModelError naming the
    failing node. `state_for`: the warehouse whose dbt state to use (a rebuild's temporary file
    uses its final path's, so the updates after it reuse its parse). `record`: keep every query
    dbt ran (DbtResult.queries; yardstick/storage/plan.py replays them).

    Ctrl-C or SIGTERM (or any stop request, yardstick/interrupt.py) stops it within seconds:
    the running query is cancelled and interrupt.Interrupted raised, never a ModelError."""
    from yardstick import interrupt

    if interrupt.STOP.is_set():
        raise interrupt.Interrupted(f"{interrupt.stop_reason()}: dbt {args[0]} not started")
    try:
        outcome, nodes, mode, queries = _invoke(
            warehouse_path, args, duckdb_threads, project, state_for, record
        )
    except KeyboardInterrupt:  # a signal just before or after dbt's own handling
        raise interrupt.Interrupted(f"{interrupt.stop_reason()}: dbt {args[0]} stopped") from None
    if interrupt.STOP.is_set() and (outcome.exception is not None or not outcome.success):
        raise interrupt.Interrupted(f"{interrupt.stop_reason()}: dbt {args[0]} stopped")
    if isinstance(outcome.exception, KeyboardInterrupt):
        raise interrupt.Interrupted(f"KeyboardInterrupt: dbt {args[0]} stopped")
    if outcome.exception is not None:
        raise ModelError(f"dbt {args[0]}: {_one_line(str(outcome.exception))}")
    if not outcome.success:
        raise ModelError(_first_failure(outcome.result))
    seconds = {
        item.node.unique_id: item.execution_time
        for item in getattr(outcome.result, "results", None) or []
    }
    return DbtResult(
        nodes=[(node, status, seconds.get(node, 0.0)) for node, status in nodes],
        parse_mode=mode,
        queries=queries,
    )


def _invoke(
    warehouse_path: Path,
    args: list[str],
    duckdb_threads: int | None,
    project: Path | None,
    state_for: Path | None,
    record: bool = False,
):
    """One dbt invocation under the state folder's lock: (outcome, [(node, status)], parse
    mode in words, the queries it ran when `record`, else None)."""
    from dbt.cli.main import dbtRunner  # heavy import: only when the warehouse is built

    _parse_ignores_path()
    state = state_dir(state_for or warehouse_path)
    argv = [
        *args,
        "--project-dir",
        str(project or project_dir()),
        "--profiles-dir",
        str(state),
        "--target-path",
        str(state / "target"),
        "--log-path",
        str(state / "logs"),
        "--quiet",
        # logs/dbt.log gets dbt's info lines (nodes, timings, errors), not a debug line per
        # query: formatting those cost ~6 % of a build.
        "--log-level-file",
        "info",
        # No network here or at users' sites: no usage events, no version check.
        "--no-send-anonymous-usage-stats",
        "--no-version-check",
        # The manifest and run results JSON are not read by anyone here; writing them costs.
        "--no-write-json",
    ]
    nodes: list[tuple[str, str]] = []
    parse_events: list[str] = []
    stopper: _Stopper | None = None

    def collect(event) -> None:
        """Keep each node's outcome and what dbt said about reusing its parse."""
        name = event.info.name
        if name == "NodeStart" and stopper is not None:
            stopper.node_started()
        if name == "NodeFinished":
            node = event.data.node_info
            nodes.append((node.unique_id, node.node_status))
        elif name == "PartialParsingSkipParsing":
            parse_events.append("saved parse reused (no project change)")
        elif name == "UnableToPartialParse":
            parse_events.append(f"full parse: {event.data.reason}")
        elif name == "PartialParsingEnabled":
            parse_events.append("partial parse (some files changed)")

    with _exclusive(state):
        _seed_parse(state, state_for or warehouse_path)
        had_parse = (state / "target" / PARSE_FILE).exists()
        settings = duckdb_settings(duckdb_threads)
        (state / "profiles.yml").write_text(
            PROFILE.format(
                path=_yaml_str(str(warehouse_path.resolve())),
                duckdb_threads=settings["threads"],
                memory_limit=_yaml_str(str(settings["memory_limit"])),
                storage_version=_yaml_str(STORAGE_VERSION),
            )
        )
        # No manifest handed from one invocation to the next: each compiles into the one it
        # is given (ephemeral CTEs injected once), so a reused one breaks the next. The saved
        # parse makes a repeated invocation skip parsing anyway.
        runner = dbtRunner(callbacks=[collect])
        queries: list[tuple[str, str, object]] | None = [] if record else None
        try:
            with _stoppable() as stopper, _recording(queries):
                outcome = runner.invoke(argv)
        finally:
            _close_duckdb()
        if args[0] in {"build", "run", "seed"} and outcome.exception is None and outcome.success:
            persist_docs(warehouse_path, project or project_dir())
    if parse_events:
        mode = parse_events[-1]
    else:
        mode = "full parse: no saved parse" if not had_parse else "full parse"
    return outcome, nodes, mode, queries


@contextmanager
def _recording(into: list | None) -> Iterator[None]:
    """Append every query dbt runs to `into` as (node unique id, sql, bindings), in order
    (nothing when `into` is None). dbt runs one invocation at a time (_DBT_LOCK), so the
    adapter's query method is wrapped for this invocation only."""
    if into is None:
        yield
        return
    from dbt.adapters.sql.connections import SQLConnectionManager
    from dbt_common.events.contextvars import get_node_info

    original = SQLConnectionManager.add_query

    def add_query(self, sql, auto_begin=True, bindings=None, *args, **kwargs):
        into.append((get_node_info().get("unique_id") or "", sql, bindings))
        return original(self, sql, auto_begin, bindings, *args, **kwargs)

    SQLConnectionManager.add_query = add_query
    try:
        yield
    finally:
        SQLConnectionManager.add_query = original


def persist_docs(warehouse_path: Path, project: Path) -> int:
    """Write the yml descriptions of every model and seed in the warehouse as DuckDB comments,
    in one transaction (dbt's own persist_docs costs queries per model); returns how many."""
    import duckdb

    described = _descriptions(project, models_digest())
    con = duckdb.connect(str(warehouse_path), config=duckdb_settings())
    try:
        kinds = {
            name: (schema, kind)
            for schema, name, kind in con.execute(
                "select schema_name, table_name, 'TABLE' from duckdb_tables()"
                " union all select schema_name, view_name, 'VIEW' from duckdb_views()"
                " where not internal"
            ).fetchall()
        }
        columns = set(
            con.execute("select table_name, column_name from duckdb_columns()").fetchall()
        )
        statements = []
        for name, node in described.items():
            if name not in kinds:  # ephemeral, or not built in this warehouse
                continue
            schema, kind = kinds[name]
            target = f"{_ident(schema)}.{_ident(name)}"
            if node.get("description"):
                statements.append(f"comment on {kind} {target} is {_literal(node['description'])}")
            for column in node.get("columns") or []:
                if (name, column["name"]) in columns and column.get("description"):
                    statements.append(
                        f"comment on column {target}.{_ident(column['name'])}"
                        f" is {_literal(column['description'])}"
                    )
        con.execute("begin")
        for statement in statements:
            con.execute(statement)
        con.execute("commit")
        return len(statements)
    finally:
        con.close()


@functools.lru_cache(maxsize=4)
def _descriptions(project: Path, digest: str) -> dict[str, dict]:
    """Every model's and seed's yml entry by name (read once per version of the models: the
    yml files take longer to parse than the comments take to write)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it
    described: dict[str, dict] = {}
    for path in sorted([*project.glob("models/**/*.yml"), *project.glob("seeds/**/*.yml")]):
        spec = yaml.load(path.read_text(), Loader=loader) or {}
        for node in [*(spec.get("models") or []), *(spec.get("seeds") or [])]:
            described[node["name"]] = node
    return described


def _ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    """A quoted SQL string literal."""
    return "'" + text.strip().replace("'", "''") + "'"


# How often a stopped build's open DuckDB queries are cancelled until dbt returns.
CANCEL_POLL_S = 0.2


class _Stopper:
    """While dbt runs, a stop request (Ctrl-C, SIGTERM, yardstick/interrupt.py) ends it within
    seconds: dbt is switched to fail-fast and its running query cancelled, so it runs no
    further node and returns. In the main thread SIGINT and SIGTERM run their own handler
    (the run's: ask every family to stop; twice: leave at once) and ask for that stop:
    Prefect's SIGTERM bridge raised an exception dbt does not handle (its nodes ran on,
    ~80 s, and the build said "unknown error"); a KeyboardInterrupt makes dbt print a
    traceback."""

    def __init__(self) -> None:
        self.executing = False  # dbt runs nodes
        self.saved: dict[int, object] = {}
        self.done = threading.Event()

    def node_started(self) -> None:
        """dbt began a node (in its pool thread)."""
        self.executing = True

    def on_signal(self, signum: int, frame) -> None:
        """The handler of SIGINT and SIGTERM while dbt runs (main thread)."""
        from yardstick import interrupt

        previous = self.saved.get(signum)
        if previous == signal.SIG_IGN:
            return
        try:
            if callable(previous) and previous is not signal.default_int_handler:
                previous(signum, frame)  # may leave at once (a second Ctrl-C)
        except BaseException:  # Prefect's TerminationSignal: the stop below instead
            pass
        interrupt.request_stop(f"{signal.Signals(signum).name} received", signum)

    def cancel_when_stopped(self) -> None:
        """Once stopped: dbt fails fast, and its open queries are cancelled until it returns
        (a node that starts after the first cancel is cancelled too)."""
        from yardstick import interrupt

        while not self.done.wait(CANCEL_POLL_S):
            # Not during dbt's parse: the first node started sees the stop.
            if interrupt.STOP.is_set() and self.executing:
                _fail_fast()
                _cancel_queries()


@contextmanager
def signals_stop_the_update() -> Iterator[None]:
    """Around a whole warehouse update (main thread): SIGINT or SIGTERM runs its own handler,
    asks for a stop and raises interrupt.Interrupted where the update is (its loader; dbt
    itself stops as _Stopper says), so a rebuild's folder is removed on the way out."""
    from yardstick import interrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved: dict[int, object] = {}

    def on_signal(signum: int, frame) -> None:
        previous = saved.get(signum)
        if previous == signal.SIG_IGN:
            return
        try:
            if callable(previous) and previous is not signal.default_int_handler:
                previous(signum, frame)  # may leave at once (a second Ctrl-C)
        except BaseException:  # Prefect's TerminationSignal: Interrupted instead
            pass
        interrupt.request_stop(f"{signal.Signals(signum).name} received", signum)
        raise interrupt.Interrupted(f"{interrupt.stop_reason()}: warehouse update stopped")

    for signum in (signal.SIGINT, signal.SIGTERM):
        saved[signum] = signal.signal(signum, on_signal)
    try:
        yield
    except Exception as exc:
        # DuckDB turns the handler's exception into its own "Query interrupted".
        if interrupt.STOP.is_set() and not isinstance(exc, interrupt.Interrupted):
            raise interrupt.Interrupted(
                f"{interrupt.stop_reason()}: warehouse update stopped"
            ) from None
        raise
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _fail_fast() -> None:
    """Make the running dbt invocation stop at its next node result (dbt reads the flag
    there; its flags are a frozen dataclass)."""
    from dbt.flags import get_flags

    flags = get_flags()
    if not getattr(flags, "FAIL_FAST", False):
        try:
            object.__setattr__(flags, "FAIL_FAST", True)
        except (AttributeError, TypeError):
            pass


@contextmanager
def _stoppable() -> Iterator[_Stopper]:
    """Make the dbt invocation inside the block stop within seconds when asked (_Stopper)."""
    # Imported here, in the caller's thread, not by the watcher in the middle of dbt's work.
    import dbt.adapters.factory  # noqa: F401
    import dbt.flags  # noqa: F401

    stopper = _Stopper()
    watcher = threading.Thread(target=stopper.cancel_when_stopped, name="dbt-cancel", daemon=True)
    watcher.start()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            stopper.saved[signum] = signal.signal(signum, stopper.on_signal)
    try:
        yield stopper
    finally:
        for signum, handler in stopper.saved.items():
            signal.signal(signum, handler)
        stopper.done.set()
        watcher.join(timeout=5)


def _cancel_queries() -> None:
    """Interrupt every query dbt-duckdb's connections are running now."""
    from dbt.adapters.factory import FACTORY

    for adapter in list(FACTORY.adapters.values()):
        for connection in list(adapter.connections.thread_connections.values()):
            handle = getattr(connection, "handle", None)
            try:
                handle.cursor().interrupt()
            except Exception:  # closed meanwhile, or not opened yet
                pass


def _close_duckdb() -> None:
    """Close the DuckDB database dbt-duckdb keeps open between invocations in one process:
    otherwise the next open of that file here (the loader's, another update's) is refused
    ("same database file with a different configuration")."""
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager as manager

    with manager._LOCK:
        if manager._ENV is not None:
            manager._ENV.close()
            manager._ENV = None


def _first_failure(results) -> str:
    """One line naming the first failed node and why."""
    for item in getattr(results, "results", None) or []:
        if str(item.status) in {"error", "fail", "runtime error"}:
            node = item.node
            path = getattr(node, "original_file_path", "") or node.unique_id
            kind = node.resource_type
            return f"{kind} {node.name} ({path}): {_one_line(item.message or str(item.status))}"
    return "dbt failed without naming a node (see the dbt log beside the warehouse)"


def _one_line(text: str) -> str:
    """The first informative line of a message."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines[:3])[:400] if lines else "unknown error"


def _yaml_str(text: str) -> str:
    """A double-quoted YAML scalar."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
