"""What a lake location may be, checked without importing the lake's libraries (the
environments file's `lake:` is checked at load; storage/lakefs.py's `Lake.at` makes the lake)."""

from __future__ import annotations

import re

# Schemes served by s3fs, in any case. "s3:/" (one slash) is what pathlib makes of "s3://".
S3_URL = re.compile(r"^(s3a?):/+(.*)$", re.IGNORECASE)
# Any other scheme ("ftp://", "gs://", "file:/..."): refused, never taken for a local folder.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")


def problem(location: str) -> str | None:
    """Why `location` cannot be a lake (one phrase, never the URL), or None."""
    if S3_URL.match(location):
        bucket = S3_URL.match(location).group(2).split("/", 1)[0]
        if "@" in bucket:
            return "credentials in an s3:// URL are refused: use the environment"
        if not bucket:
            return "an s3:// URL needs a bucket"
        return None
    if other := _SCHEME.match(location):
        return (
            f"the {other.group(1).lower()}:// scheme is not supported: "
            "give a local folder or s3://bucket/prefix"
        )
    return None
