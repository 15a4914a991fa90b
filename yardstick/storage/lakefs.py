"""Where the lake lives: a local folder (the default) or a prefix on S3-compatible storage.

The lake is one value, `Lake` (its URI and delta-rs's storage options), made once where a
location enters the tool (the flows' `lake_dir` parameter, the CLI, the environments file)
and passed down to every lake function (delta.write/read/data_files, compaction.compact,
retention.apply, warehouse.update/build, preflight.check_writable). Paths inside it are
strings: an absolute local path, or an s3:// URL.

Endpoint, region and credentials come from the environment only, read by botocore itself:
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (or AWS_PROFILE, an instance
role...), AWS_REGION / AWS_DEFAULT_REGION, and AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for
an S3-compatible server (botocore >= 1.31 honours both; s3fs passes them through). Nothing
here reads, stores, logs or prints them: not in Parquet footers, not in DuckDB, not in the
one-line errors (see `describe_error`).

The lake's tables are Delta tables (yardstick/storage/delta.py): delta-rs writes and commits
them through its own object store, given `storage_options` (conditional put by ETag, so two
writers committing the same version never overwrite each other: one retries on top of the
other). This module keeps what the tool itself needs around them: the lake's root, reading
data files and listing folders through s3fs (DuckDB reads them through it as well), the
lake's lease (its lock file: storage/lakelock.py), and one-line errors that never name the
endpoint or a credential.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

# s3:// in any case ("s3:/", what pathlib makes of it, too): yardstick/storage/location.py.
from yardstick.storage import panics
from yardstick.storage.location import S3_URL as _URL
from yardstick.storage.location import problem as location_problem

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class Lake:
    """The lake: where it lives (`uri`: an absolute folder, or s3://bucket/prefix) and the
    options delta-rs opens its tables with. Made once at the edge (`Lake.at`), passed down."""

    uri: str
    storage_options: dict[str, str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def at(cls, location: str | os.PathLike | Lake) -> Lake:
        """The lake at a folder or an s3:// URL (credentials in the URL are refused)."""
        if isinstance(location, Lake):
            return location
        # Never echo the URL in the error: it could hold a secret.
        if why := location_problem(str(location)):
            raise ValueError(why)
        match = _URL.match(str(location))
        if not match:
            return cls(str(Path(location).resolve()))
        key = "/".join(part for part in match.group(2).split("/") if part)
        return cls(f"s3://{key}", _s3_options())

    def __str__(self) -> str:
        return self.uri

    @property
    def remote(self) -> bool:
        """True for an S3 lake."""
        return self.uri.startswith("s3://")

    @property
    def folder(self) -> Path:
        """A local lake's folder (an S3 lake has none)."""
        if self.remote:
            raise ValueError(f"{self.uri}: an S3 lake has no local folder")
        return Path(self.uri)

    def path(self, *parts: str) -> str:
        """A file or folder of the lake, by its parts below the root (a path or a URL)."""
        return join(self.uri, *parts)

    def table(self, name: str):
        """The table's DeltaTable (its latest version), or None when nothing landed in it yet."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        uri = self.path(name)
        if not self.remote and not os.path.isdir(join(uri, "_delta_log")):
            return None
        try:
            with storage_errors("reading the table log", uri):
                return DeltaTable(uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None


def join(path: str, *parts: str) -> str:
    """`path` with `parts` below it, "/"-joined (empty parts dropped)."""
    extra = [p for part in parts for p in str(part).split("/") if p]
    return "/".join([path.rstrip("/"), *extra]) if extra else path


def parent(path: str) -> str:
    """The folder holding `path`."""
    return path.rstrip("/").rsplit("/", 1)[0]


def name(path: str) -> str:
    """The last part of `path`."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def is_remote(path: str | os.PathLike | Lake) -> bool:
    """True for an s3:// lake or a path in one."""
    return isinstance(path, Lake) and path.remote or bool(_URL.match(str(path)))


def _split(url: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// URL."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


# --- the S3 filesystem -------------------------------------------------------------------

_FS: dict[str, Any] = {}
_FS_LOCK = threading.Lock()


def _env_token() -> str:
    """A digest of the settings botocore reads, so a changed environment gets a new client
    (the values themselves are never kept)."""
    items = sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))
    return hashlib.sha256(repr((os.getpid(), items)).encode()).hexdigest()


def filesystem(probe: bool = False) -> Any:
    """The s3fs filesystem for the current environment (no listing cache: other processes
    land files meanwhile). `probe=True`: one quick attempt, for preflight."""
    import s3fs

    key = _env_token() + (":probe" if probe else "")
    with _FS_LOCK:
        fs = _FS.get(key)
        if fs is None:
            kwargs: dict[str, Any] = {"use_listings_cache": False, "skip_instance_cache": True}
            if probe:
                kwargs["config_kwargs"] = {
                    "connect_timeout": 5,
                    "read_timeout": 10,
                    "retries": {"max_attempts": 1},
                }
            fs = s3fs.S3FileSystem(**kwargs)
            if probe:
                fs.retries = 1
            _FS[key] = fs
        return fs


# --- operations on one path, local or remote ---------------------------------------------


class StorageError(OSError):
    """An object-storage call failed: one line naming the lake path and a reason, never the
    endpoint or a credential (botocore's own messages may name the endpoint)."""


@contextlib.contextmanager
def storage_errors(what: str, path: object) -> Iterator[None]:
    """Turn botocore/aiohttp/s3fs failures into StorageError; a missing or existing key stays
    FileNotFoundError / FileExistsError (the callers' protocol uses them). A Rust panic that
    delta-rs prints meanwhile (a full disk) stays off stderr: this error says it in a line."""
    try:
        with panics.kept_off_stderr():
            yield
    except (FileNotFoundError, FileExistsError, StorageError):
        raise
    except Exception as exc:
        module = type(exc).__module__
        if is_remote(path) and _object_store_error(exc):
            raise StorageError(f"{path}: {what} failed ({describe_error(exc)})") from None
        if (_is_delta(exc) or isinstance(exc, OSError)) and (code := _os_error_code(exc)):
            # delta-rs's report of the system's failure (a full disk above all) as its OSError.
            raise OSError(code, os.strerror(code), f"{path}: {what} failed") from None
        if isinstance(exc, OSError) or module.startswith(("botocore", "aiobotocore", "aiohttp")):
            raise StorageError(f"{path}: {what} failed ({describe_error(exc)})") from None
        if _is_delta(exc) and not is_remote(path):
            # A local table the tool cannot read (a damaged log): one line, not delta-rs's
            # multi-line report with its Rust backtrace.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StorageError(f"{path}: {what} failed ({first[:300]})") from None
        raise


def _is_delta(exc: BaseException) -> bool:
    """Whether `exc` is one of deltalake's errors (raised from its Rust core)."""
    from deltalake.exceptions import DeltaError

    return isinstance(exc, DeltaError)


def _os_error_code(exc: BaseException) -> int | None:
    """The errno a deltalake error reports from the operating system ("(os error 28)")."""
    match = re.search(r"\(os error (\d+)\)", str(exc))
    return int(match.group(1)) if match else None


def _object_store_error(exc: BaseException) -> bool:
    """Whether a deltalake error comes from its object store (its text names the endpoint)."""
    text = str(exc)
    return "S3 error" in text or "Object at location" in text or "error sending request" in text


def _s3_options() -> dict[str, str]:
    """delta-rs's options for an S3 lake's tables: a conditional put by ETag for commits (S3
    since 2024, moto too), plain HTTP when the endpoint is http://, and AWS_ENDPOINT_URL_S3
    passed on (delta-rs reads the other AWS_* variables itself; no credential is kept here)."""
    options = {"conditional_put": "etag"}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint"] = endpoint
        if endpoint.startswith("http://"):
            options["allow_http"] = "true"
    return options


def exists(path: str) -> bool:
    """Whether a file exists (on S3 one HEAD request: not s3fs's exists(), which also lists
    the key as a folder when it is missing)."""
    if is_remote(path):
        bucket, key = _split(path)
        try:
            with storage_errors("HEAD", path):
                filesystem().call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return False
        return True
    return os.path.exists(path)


def list_names(folder: str) -> list[str]:
    """Names of the entries directly in `folder` ([] when it does not exist)."""
    if is_remote(folder):
        try:
            with storage_errors("listing", folder):
                names = filesystem().ls(folder, detail=False)
            return [p.rsplit("/", 1)[-1] for p in names]
        except FileNotFoundError:
            return []
    return os.listdir(folder) if os.path.isdir(folder) else []


def read_schema(path: str) -> pa.Schema:
    """A Parquet file's schema (remote: its footer, one ranged GET after a HEAD)."""
    if not is_remote(path):
        return pq.read_schema(path)
    fs = filesystem()
    with storage_errors("reading", path):
        with fs.open(path, "rb", block_size=2**16, cache_type="readahead") as f:
            return pq.read_schema(f)


def read_table(path: str, **kwargs: Any) -> pa.Table:
    """A lake file's rows, local or remote (one GET of the whole object); keyword arguments go
    to pyarrow.parquet.read_table (columns=, filters=...)."""
    if is_remote(path):
        with storage_errors("reading", path):
            blob = filesystem().cat_file(path)
        return pq.read_table(pa.BufferReader(blob), **kwargs)
    return pq.read_table(path, **kwargs)


def delete_many(paths: list[str]) -> None:
    """Delete files; missing ones are no error (on S3: DeleteObjects, 1,000 keys a request)."""
    remote = [p for p in paths if is_remote(p)]
    if remote:
        with storage_errors("deleting", remote[0]):
            filesystem().rm(remote)
    for path in paths:
        if not is_remote(path):
            Path(path).unlink(missing_ok=True)


def delete(path: str) -> None:
    """Delete a file; a missing one is no error."""
    if is_remote(path):
        with contextlib.suppress(FileNotFoundError), storage_errors("deleting", path):
            filesystem().rm_file(path)
        return
    Path(path).unlink(missing_ok=True)


# A compaction or retention pass on an S3 lake holds this object (written only if absent) for
# at most LEASE_S; one left by a machine that died is taken over once it has expired.
LEASE = "_yardstick_lease.json"
LEASE_S = 3600.0


@contextlib.contextmanager
def lease(lake: Lake, owner: str) -> Iterator[bool]:
    """Hold the lake-wide lease of an S3 lake if free (yield True), else yield False. Needed
    because delta-rs's conflict check does not refuse two optimizes (or an optimize and a
    delete) that removed the same files from two stale snapshots: both would commit, and the
    rows of those files would be doubled (or deleted rows come back). The lease, a conditional
    put (If-None-Match: *), keeps those passes of two machines apart; appends never need it."""
    import json

    fs = filesystem()
    key = lake.path(LEASE)
    mine = json.dumps({"owner": owner, "token": secrets.token_hex(8), "until": 0.0})
    for _ in range(2):
        body = json.loads(mine)
        body["until"] = time.time() + LEASE_S
        mine = json.dumps(body)
        try:
            with storage_errors("taking the lake's lease", lake):
                fs.pipe_file(key, mine.encode(), mode="create")
            break
        except FileExistsError:
            try:
                with storage_errors("reading the lake's lease", lake):
                    held = json.loads(fs.cat_file(key))
            except FileNotFoundError:
                continue  # released meanwhile: try again
            if float(held.get("until", 0)) > time.time():
                yield False
                return
            delete(key)  # expired: its holder died; take it over
    else:
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(Exception):
            if fs.cat_file(key).decode() == mine:
                fs.rm_file(key)


def lease_owner(lake: Lake) -> str:
    """Who holds the lake's lease, as its holder wrote it ('another machine' when unreadable)."""
    import json

    try:
        held = json.loads(filesystem().cat_file(lake.path(LEASE)))
        until = time.strftime("%H:%M:%S", time.gmtime(float(held["until"])))
        return f"{held['owner']}, its lease until {until} UTC"
    except Exception:  # gone meanwhile, or not ours to read: the pass is skipped all the same
        return "another machine"


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Let DuckDB read s3:// paths through s3fs (no httpfs extension, nothing to download;
    nothing is stored in the database)."""
    try:
        con.register_filesystem(filesystem())
    except Exception as exc:  # already registered on this connection
        if "already" not in str(exc).lower():
            raise


# --- reachability ------------------------------------------------------------------------


def describe_error(exc: BaseException) -> str:
    """Why an S3 call failed, in words that never include the endpoint or a credential."""
    name = type(exc).__name__
    if _is_delta(exc) or _object_store_error(exc):
        text = str(exc).lower()
        if "nosuchbucket" in text or "bucket does not exist" in text:
            return "the bucket does not exist"
        if "accessdenied" in text or "forbidden" in text or "invalidaccesskey" in text:
            return "access denied (credentials refused, or not allowed here)"
        if "credential" in text:
            return (
                "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a profile"
            )
        if "error sending request" in text or "connect" in text or "dns" in text:
            return "the storage endpoint cannot be reached"
        return f"the object store refused the request ({name})"
    if name == "NoCredentialsError" or name == "PartialCredentialsError":
        return "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a profile"
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"):
        return "the storage endpoint cannot be reached"
    if isinstance(exc, FileNotFoundError):
        return "the bucket does not exist"
    if isinstance(exc, PermissionError):
        return "access denied (credentials refused, or not allowed here)"
    if isinstance(exc, FileExistsError):
        return "the object already exists"
    if type(exc).__module__.startswith(("botocore", "aiobotocore", "aiohttp")):
        return name  # their messages may name the endpoint
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror  # s3fs's translation of the server's error message
    return name


def probe(lake: Lake) -> None:
    """Write and delete a small object under the lake; raise OSError(reason) if that fails
    (reason from describe_error: no endpoint, no credential)."""
    fs = filesystem(probe=True)
    key = lake.path(f".yardstick-probe-{secrets.token_hex(4)}")
    try:
        fs.pipe_file(key, b"probe")
        fs.rm_file(key)
    except Exception as exc:  # botocore and aiohttp errors are not all OSErrors
        raise OSError(describe_error(exc)) from None
