"""Before any family runs: every folder the run writes to can be written, with room to spare.

Found after the measurements, an unwritable lake would cost a whole run (scratch writes
included) and leave no report; found first, it costs one line. An S3 lake
(`s3://bucket/prefix`, yardstick/storage/lakefs.py) is probed by writing and deleting one small
object; its line names the lake's URL and a reason, never the endpoint or a credential."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from yardstick.storage import lakefs
from yardstick.storage.lakefs import ObjectPath

# Below this much free space a run's lake files, warehouse rebuild and reports may not fit.
MIN_FREE_BYTES = 64 * 1024 * 1024


class NotWritable(Exception):
    """A folder the run must write to cannot be written (one line, naming it)."""


def check_writable(
    folders: dict[str, Path | ObjectPath | str], min_free_bytes: int = MIN_FREE_BYTES
) -> None:
    """Create each folder if needed, write and remove a probe file in it, check free space
    (an S3 lake: write and delete a probe object; object storage has no free space to check)."""
    for label, folder in folders.items():
        if lakefs.is_remote(folder):
            try:
                root = lakefs.lake_root(folder)
            except ValueError as exc:  # the message never repeats the URL
                raise NotWritable(f"{label}: {exc}") from None
            try:
                lakefs.probe(root)
            except OSError as exc:
                raise NotWritable(f"{label} {root}: cannot be written ({exc})") from None
            continue
        folder = Path(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".yardstick-probe-"):
                pass
            free = shutil.disk_usage(folder).free
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise NotWritable(f"{label} {folder}: cannot be written ({reason})") from None
        if free < min_free_bytes:
            raise NotWritable(
                f"{label} {folder}: only {free // (1024 * 1024)} MiB free "
                f"(a run needs at least {min_free_bytes // (1024 * 1024)} MiB)"
            )


def run_folders(lake_dir: str | Path, warehouse_path: str | Path, out_dir: str | Path) -> dict:
    """The folders a nightly run writes to, labelled as the options that name them (an S3
    lake stays its s3:// URL, checked by check_writable)."""
    return {
        "lake": str(lake_dir) if lakefs.is_remote(lake_dir) else Path(lake_dir),
        "warehouse folder": Path(warehouse_path).parent,
        "output folder": Path(out_dir),
    }
