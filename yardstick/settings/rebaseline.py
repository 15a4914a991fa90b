"""A series declared the new normal, written into the environments file's `rebaseline:` list as
text (its comments and layout kept), checked as the file is before it is replaced."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import yaml

from yardstick.settings.config import ConfigError, Rebaseline, load_config

_TOP_KEY = re.compile(r"^[A-Za-z_][\w-]*\s*:")


def entry_text(entry: Rebaseline, indent: str) -> str:
    """One `rebaseline:` item as YAML lines, its dash at `indent`."""
    fields = entry.model_dump(exclude_none=True, mode="json")
    body = yaml.safe_dump(fields, sort_keys=False, allow_unicode=True, width=1000).splitlines()
    return "".join(f"{indent}{'- ' if i == 0 else '  '}{line}\n" for i, line in enumerate(body))


def with_entry(text: str, entry: Rebaseline) -> str:
    """The file's text with `entry` appended to its `rebaseline:` list (the list made if none)."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"^rebaseline\s*:", line)), None)
    if start is None:
        tail = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{tail}rebaseline:\n{entry_text(entry, '  ')}"
    if lines[start].split(":", 1)[1].split("#", 1)[0].strip():
        raise ConfigError("rebaseline: is written inline; add the entry to it by hand")
    end = next((i for i in range(start + 1, len(lines)) if _TOP_KEY.match(lines[i])), len(lines))
    while end > start + 1 and not lines[end - 1].strip():  # before the blank lines that follow
        end -= 1
    items = [line for line in lines[start + 1 : end] if line.lstrip().startswith("- ")]
    indent = items[0][: len(items[0]) - len(items[0].lstrip())] if items else "  "
    head = "".join(lines[:end])
    if not head.endswith("\n"):
        head += "\n"
    return head + entry_text(entry, indent) + "".join(lines[end:])


def declare(path: Path, entry: Rebaseline) -> None:
    """Append `entry` to the file at `path`, replaced only once the new text loads (ConfigError
    otherwise, the file left as it was)."""
    text = path.read_text(encoding="utf-8")
    if entry in load_config(path).rebaseline:
        raise ConfigError(f"{path}: this series is already declared the new normal on that day")
    new = with_entry(text, entry)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(new)
        try:
            load_config(tmp)
        except ConfigError as exc:  # said of the real file, not of the temporary one
            raise ConfigError(str(exc).replace(tmp, str(path))) from None
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
