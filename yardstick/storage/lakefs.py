"""Where the lake lives: a local folder (the default) or a prefix on S3-compatible storage.

Every lake function (lake.write/scan/current_files, compaction.compact, retention.apply,
warehouse.update/build, preflight.check_writable) takes `lake_dir` as a local path or as
`s3://bucket/prefix`. A local path is handled exactly as before (os calls: link() for atomic
landing, flock for the lake's lock); an S3 lake goes through fsspec's s3fs.

Endpoint, region and credentials come from the environment only, read by botocore itself:
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (or AWS_PROFILE, an instance
role...), AWS_REGION / AWS_DEFAULT_REGION, and AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for
an S3-compatible server (botocore >= 1.31 honours both; s3fs passes them through). Nothing
here reads, stores, logs or prints them: not in Parquet footers, not in DuckDB, not in the
one-line errors (see `describe_error`).

Landing on S3 is atomic and append-only:
- the Parquet file is written to a local temporary file, then uploaded with one PUT (or, above
  2 x CHUNK_BYTES, one multipart upload, which S3 makes visible only when completed);
- the PUT/complete carries `If-None-Match: *` (a conditional write, S3 since 2024, moto too):
  an existing key is never overwritten, even when two writers race (the loser gets
  FileExistsError). A cheap existence check before the upload gives the same error earlier;
- a landing killed halfway leaves no object at all: at most an unfinished multipart upload,
  which no listing shows; compaction aborts those older than an hour and says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    import duckdb

# Parquet files up to 2 x this size are uploaded with one PUT; larger ones as a multipart
# upload in parts of this size (S3's minimum part is 5 MiB).
CHUNK_BYTES = 50 * 2**20
# Schemes served by s3fs. "s3:/" (one slash) is what pathlib makes of "s3://": accepted too.
_URL = re.compile(r"^(s3a?):/+(.*)$")


class ObjectPath:
    """A key on object storage, with the part of pathlib's API the lake code uses
    (`/`, name, stem, parent, parents, with_name, relative_to). str() is its URL."""

    __slots__ = ("scheme", "key")

    def __init__(self, url: str) -> None:
        match = _URL.match(url)
        if not match:
            raise ValueError("not an s3:// URL")
        bucket_and_key = match.group(2)
        if "@" in bucket_and_key.split("/", 1)[0]:
            # Never echo the URL: it would hold a secret.
            raise ValueError("credentials in an s3:// URL are refused: use the environment")
        self.scheme = "s3"
        self.key = "/".join(part for part in bucket_and_key.split("/") if part)
        if not self.key:
            raise ValueError("an s3:// URL needs a bucket")

    @classmethod
    def _of(cls, scheme: str, key: str) -> ObjectPath:
        path = object.__new__(cls)
        path.scheme, path.key = scheme, key
        return path

    def __str__(self) -> str:
        return f"{self.scheme}://{self.key}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and (self.scheme, self.key) == (
            other.scheme,
            other.key,
        )

    def __hash__(self) -> int:
        return hash((self.scheme, self.key))

    def __lt__(self, other: ObjectPath) -> bool:
        return self.key < other.key

    def __truediv__(self, other: str | PurePosixPath) -> ObjectPath:
        extra = [part for part in str(other).split("/") if part]
        return ObjectPath._of(self.scheme, "/".join([self.key, *extra]))

    @property
    def bucket(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def prefix(self) -> str:
        """The key inside the bucket ('' for the bucket itself)."""
        return self.key.partition("/")[2]

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        name = self.name
        return name.rsplit(".", 1)[0] if "." in name[1:] else name

    @property
    def parent(self) -> ObjectPath:
        if "/" not in self.key:
            return self
        return ObjectPath._of(self.scheme, self.key.rsplit("/", 1)[0])

    @property
    def parents(self) -> tuple[ObjectPath, ...]:
        found: list[ObjectPath] = []
        path = self
        while "/" in path.key:
            path = path.parent
            found.append(path)
        return tuple(found)

    def joinpath(self, *parts: str) -> ObjectPath:
        path = self
        for part in parts:
            path = path / part
        return path

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def relative_to(self, other: ObjectPath) -> PurePosixPath:
        if not self.key.startswith(other.key + "/"):
            raise ValueError(f"{self} is not under {other}")
        return PurePosixPath(self.key[len(other.key) + 1 :])


LakePath = Path | ObjectPath


def is_remote(lake_dir: str | os.PathLike | ObjectPath) -> bool:
    """True for an s3:// lake."""
    return isinstance(lake_dir, ObjectPath) or bool(_URL.match(str(lake_dir)))


def lake_root(lake_dir: str | os.PathLike | ObjectPath) -> LakePath:
    """The lake's root: an ObjectPath for s3://bucket/prefix, else a local Path."""
    if isinstance(lake_dir, ObjectPath):
        return lake_dir
    if is_remote(lake_dir):
        return ObjectPath(str(lake_dir))
    return Path(lake_dir)


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
def _storage(what: str, path: object) -> Iterator[None]:
    """Turn botocore/aiohttp/s3fs failures into StorageError; a missing or existing key stays
    FileNotFoundError / FileExistsError (the callers' protocol uses them)."""
    try:
        yield
    except (FileNotFoundError, FileExistsError, StorageError):
        raise
    except Exception as exc:
        module = type(exc).__module__
        if isinstance(exc, OSError) or module.startswith(("botocore", "aiobotocore", "aiohttp")):
            raise StorageError(f"{path}: {what} failed ({describe_error(exc)})") from None
        raise


def exists(path: LakePath) -> bool:
    """Whether a file exists (on S3 one HEAD request: not s3fs's exists(), which also lists
    the key as a folder when it is missing)."""
    if isinstance(path, ObjectPath):
        try:
            with _storage("HEAD", path):
                filesystem().call_s3("head_object", Bucket=path.bucket, Key=path.prefix)
        except FileNotFoundError:
            return False
        return True
    return path.exists()


def list_names(folder: LakePath) -> list[str]:
    """Names of the entries directly in `folder` ([] when it does not exist)."""
    if isinstance(folder, ObjectPath):
        try:
            with _storage("listing", folder):
                names = filesystem().ls(str(folder), detail=False)
            return [p.rsplit("/", 1)[-1] for p in names]
        except FileNotFoundError:
            return []
    return os.listdir(folder) if folder.is_dir() else []


def list_files(
    root: ObjectPath, tables: list[str] | None, envs: list[str] | None = None
) -> list[tuple[str, ...]]:
    """Every object under the lake (or under the folders of `tables`, of `envs`) as its parts
    below the root (table, env=..., partition, name). S3 lists 1,000 keys a request: the whole
    lake in one paginated listing, or one listing per table (per table and environment when
    that is at most 32 prefixes: a collection's compaction of its site's environments)."""
    fs = filesystem()
    if tables is None:
        prefixes = [root]
    elif envs is not None and len(tables) * len(envs) <= 32:
        prefixes = [root / t / f"env={e}" for t in tables for e in envs]
    else:
        prefixes = [root / t for t in tables]
    found: list[tuple[str, ...]] = []
    for prefix in prefixes:
        with _storage("listing", prefix):
            keys = fs.find(str(prefix))
        for key in keys:
            if key.startswith(root.key + "/"):
                found.append(tuple(key[len(root.key) + 1 :].split("/")))
    return found


def read_schema(path: ObjectPath) -> pa.Schema:
    """A remote Parquet file's schema (its footer: one ranged GET after a HEAD)."""
    fs = filesystem()
    with _storage("reading", path):
        with fs.open(str(path), "rb", block_size=2**16, cache_type="readahead") as f:
            return pq.read_schema(f)


def read_table(path: LakePath, **kwargs: Any) -> pa.Table:
    """A lake file's rows, local or remote (one GET of the whole object); keyword arguments go
    to pyarrow.parquet.read_table (columns=, filters=...)."""
    if isinstance(path, ObjectPath):
        with _storage("reading", path):
            blob = filesystem().cat_file(str(path))
        return pq.read_table(pa.BufferReader(blob), **kwargs)
    return pq.read_table(path, **kwargs)


def read_tables(paths: list[ObjectPath]) -> list[pa.Table]:
    """Whole remote Parquet files, fetched concurrently (s3fs gathers the GETs)."""
    if not paths:
        return []
    with _storage("reading", paths[0].parent):
        blobs = filesystem().cat([str(p) for p in paths], on_error="raise")
    return [pq.read_table(pa.BufferReader(blobs[p.key])) for p in paths]


def delete_many(paths: list[LakePath]) -> None:
    """Delete files; missing ones are no error (on S3: DeleteObjects, 1,000 keys a request)."""
    remote = [str(p) for p in paths if isinstance(p, ObjectPath)]
    if remote:
        with _storage("deleting", remote[0]):
            filesystem().rm(remote)
    for path in paths:
        if not isinstance(path, ObjectPath):
            path.unlink(missing_ok=True)


def delete(path: LakePath) -> None:
    """Delete a file; a missing one is no error."""
    if isinstance(path, ObjectPath):
        with contextlib.suppress(FileNotFoundError), _storage("deleting", path):
            filesystem().rm_file(str(path))
        return
    path.unlink(missing_ok=True)


def put_parquet(data: pa.Table, final: ObjectPath, row_group_size: int | None = None) -> None:
    """Upload `data` as a Parquet object at `final`, atomically and never overwriting:
    FileExistsError if the key exists (checked first, and enforced by the conditional put)."""
    fs = filesystem()
    if exists(final):
        raise FileExistsError(str(final))
    fd, tmp = tempfile.mkstemp(prefix=".yardstick-landing-", suffix=".parquet")
    os.close(fd)
    try:
        pq.write_table(data, tmp, compression="zstd", row_group_size=row_group_size)
        # One PUT, or a multipart upload completed only once every part is there; both with
        # If-None-Match: * (s3fs mode="create"), so a racing writer cannot be overwritten.
        with _storage("upload", final):
            fs.put_file(tmp, str(final), chunksize=CHUNK_BYTES, mode="create")
    finally:
        os.unlink(tmp)


def put_text(path: LakePath, text: str) -> None:
    """Replace a small text file whole (readers see the old or the new one)."""
    if isinstance(path, ObjectPath):
        with _storage("upload", path):
            filesystem().pipe_file(str(path), text.encode())
        return
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(2)}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:  # a full disk leaves no half temporary file behind
        tmp.unlink(missing_ok=True)


def abort_stale_uploads(root: ObjectPath, older_than_s: float) -> list[str]:
    """Abort unfinished multipart uploads under the lake (landings killed halfway) started
    more than `older_than_s` ago; return their keys relative to the lake."""
    fs = filesystem()
    aborted: list[str] = []
    now = datetime.now(UTC)
    params: dict[str, str] = {"Bucket": root.bucket, "Prefix": root.prefix + "/"}
    while True:
        with _storage("listing unfinished uploads", root):
            page = fs.call_s3("list_multipart_uploads", **params)
        for upload in page.get("Uploads", []):
            started = upload.get("Initiated")
            if started is not None and (now - started).total_seconds() < older_than_s:
                continue
            with contextlib.suppress(FileNotFoundError), _storage("abort", root):
                fs.call_s3(
                    "abort_multipart_upload",
                    Bucket=root.bucket,
                    Key=upload["Key"],
                    UploadId=upload["UploadId"],
                )
            aborted.append(upload["Key"][len(root.prefix) + 1 :] + " (unfinished upload)")
        if not page.get("IsTruncated"):
            return aborted
        params["KeyMarker"] = page["NextKeyMarker"]
        params["UploadIdMarker"] = page["NextUploadIdMarker"]


def lock_file(root: LakePath) -> Path:
    """The file whose flock is the lake's compaction lock: inside a local lake; for an S3 lake
    a machine-wide file named after the lake's URL (YARDSTICK_LOCK_DIR, else
    /tmp/redis-yardstick-locks), so it keeps apart compactions on this machine only."""
    if isinstance(root, ObjectPath):
        folder = Path(os.environ.get("YARDSTICK_LOCK_DIR") or "/tmp/redis-yardstick-locks")
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"lake-{hashlib.sha256(str(root).encode()).hexdigest()[:16]}.lock"
    root.mkdir(parents=True, exist_ok=True)
    return root / ".compaction.lock"


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


def probe(root: ObjectPath) -> None:
    """Write and delete a small object under the lake; raise OSError(reason) if that fails
    (reason from describe_error: no endpoint, no credential)."""
    fs = filesystem(probe=True)
    key = root / f".yardstick-probe-{secrets.token_hex(4)}"
    try:
        fs.pipe_file(str(key), b"probe")
        fs.rm_file(str(key))
    except Exception as exc:  # botocore and aiohttp errors are not all OSErrors
        raise OSError(describe_error(exc)) from None
