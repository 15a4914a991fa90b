"""A rendered report as a Prefect artifact: the UI serves no file beside it, so every chart it
shows is inlined as a data URI and no relative link is left (each would 404 there)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

# ![alt](target) and [text](target); a target with a scheme (https:, data:) or an anchor is
# left alone.
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_ABSOLUTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)", re.IGNORECASE)
_IMAGE_TYPES = {".svg": "image/svg+xml", ".png": "image/png"}


def _data_uri(path: Path) -> str | None:
    """The file as a data URI, or None when it is missing or not an image."""
    kind = _IMAGE_TYPES.get(path.suffix.lower())
    if kind is None or not path.is_file():
        return None
    return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode()}"


def for_artifact(markdown: str, base_dir: Path) -> str:
    """The report's markdown with its relative images inlined, links to charts turned into
    numbered charts appended at the end, and links to other reports left as their text."""
    appended: list[str] = []

    def replace(match: re.Match[str]) -> str:
        bang, text, target = match.groups()
        if _ABSOLUTE.match(target):
            return match.group(0)
        uri = _data_uri(base_dir / target)
        if bang:
            # A chart that is not there: its title, not a broken image.
            return f"![{text}]({uri})" if uri else f"*{text} (chart not rendered)*"
        if uri is None:
            return text  # another report: the UI has it as its own artifact
        appended.append(f"**chart {len(appended) + 1}**\n\n![chart {len(appended) + 1}]({uri})")
        return f"{text} {len(appended)} (below)"

    body = _LINK.sub(replace, markdown)
    if appended:
        body += "\n\n## Charts of the table above\n\n" + "\n\n".join(appended) + "\n"
    return body


def relative_links(markdown: str) -> list[str]:
    """The relative link and image targets left in `markdown` (none in an artifact)."""
    return [m.group(3) for m in _LINK.finditer(markdown) if not _ABSOLUTE.match(m.group(3))]
