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
from yardstick.storage.lakefs import Lake

# Below this much free space a run's lake files, warehouse rebuild and reports may not fit.
MIN_FREE_BYTES = 64 * 1024 * 1024


class NotWritable(Exception):
    """A folder the run must write to cannot be written (one line, naming it)."""


def check_writable(
    folders: dict[str, Path | Lake | str], min_free_bytes: int = MIN_FREE_BYTES
) -> None:
    """Create each folder if needed, write and remove a probe file in it, check free space
    (an S3 lake: write and delete a probe object; object storage has no free space to check)."""
    for label, folder in folders.items():
        if lakefs.is_remote(folder):
            try:
                root = Lake.at(folder)
            except ValueError as exc:  # the message never repeats the URL
                raise NotWritable(f"{label}: {exc}") from None
            try:
                lakefs.probe(root)
            except OSError as exc:
                raise NotWritable(f"{label} {root}: cannot be written ({exc})") from None
            continue
        folder = folder.folder if isinstance(folder, Lake) else Path(folder)
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


def lake_at(location: str | Path) -> Lake:
    """The run's lake from its configured location (NotWritable: one line, never the URL)."""
    try:
        return Lake.at(location)
    except ValueError as exc:  # the message never repeats the URL
        raise NotWritable(f"lake: {exc}") from None


def path_problems(
    lake: Lake | None, warehouse_path: str | Path | None, out_dir: str | Path | None
) -> list[str]:
    """What is wrong with the paths a run was given, found without creating anything: a
    directory where the warehouse file goes, a file where a folder goes (one phrase each)."""
    problems: list[str] = []
    if warehouse_path is not None:
        warehouse = Path(warehouse_path)
        if warehouse.is_dir():
            problems.append(
                f"warehouse {warehouse}: is a directory (--warehouse names the DuckDB file, "
                f"e.g. {warehouse / 'warehouse.duckdb'})"
            )
        elif warehouse.parent.exists() and not warehouse.parent.is_dir():
            problems.append(f"warehouse folder {warehouse.parent}: is a file, not a folder")
    folders = {"output folder": out_dir}
    if lake is not None and not lake.remote:
        folders["lake"] = lake.folder
    for label, folder in folders.items():
        if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
            problems.append(f"{label} {folder}: is a file, not a folder")
    return problems


def check_run_paths(lake: Lake, warehouse_path: str | Path, out_dir: str | Path) -> None:
    """The run's paths are of the right kind, then writable with room (NotWritable: one line
    naming every problem)."""
    problems = path_problems(lake, warehouse_path, out_dir)
    if problems:
        raise NotWritable("; ".join(problems))
    check_writable(run_folders(lake, warehouse_path, out_dir))


def run_folders(lake: Lake, warehouse_path: str | Path, out_dir: str | Path) -> dict:
    """The folders a nightly run writes to, labelled as the options that name them (an S3
    lake is probed with an object, a local one as a folder)."""
    return {
        "lake": lake,
        "warehouse folder": Path(warehouse_path).parent,
        "output folder": Path(out_dir),
    }
