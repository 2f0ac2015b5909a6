"""The ``Range`` header of a segment download (RFC 9110 section 14). Pure.

One byte range is served: ``bytes=FIRST-LAST``, ``bytes=FIRST-`` (to the end) or
``bytes=-N`` (the last N bytes); LAST beyond the end is cut to the end. A header that does not
parse, uses another unit, or asks for several ranges is ignored, as the RFC allows: the whole
body is sent with 200. A range starting at or past the end cannot be satisfied (416).
"""

from __future__ import annotations

import re

MAX_HEADER = 100  # a resuming client sends one short range
_ONE_RANGE = re.compile(r"bytes=([0-9]{0,19})-([0-9]{0,19})", re.ASCII)


class Unsatisfiable(ValueError):
    """The range starts at or after the end of the body: answer 416."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end)`` (end exclusive) of the one range to serve, None for the whole body."""
    if header is None or len(header) > MAX_HEADER:
        return None
    match = _ONE_RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match[1], match[2]
    if not first:
        if not last:
            return None
        suffix = int(last)
        if suffix == 0:
            raise Unsatisfiable("a suffix range of 0 bytes")
        return max(size - suffix, 0), size
    start = int(first)
    end = size if not last else int(last) + 1
    if last and end <= start:
        return None  # last before first: not a valid range, ignored
    if start >= size:
        raise Unsatisfiable(f"the range starts at byte {start}, the body has {size}")
    return start, min(end, size)
