"""Which line of a TOML config file a validation error's field path points at.

tomllib keeps no positions, so this scans the text the way TOML nests it: ``[a.b]`` and
``[[a]]`` headers open a path, ``key = value`` (dotted keys too) extends it. It is a locator for
error messages only: anything it cannot place falls back to the nearest enclosing line it knows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(
    r"""^\s*((?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+))*)\s*="""
)
_PART = re.compile(r"""\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*(?:\.|$)""")

Path = tuple[str | int, ...]


def _parts(dotted: str) -> list[str]:
    return [p.strip("\"'") for p in _PART.findall(dotted)]


def _scan(text: str) -> dict[Path, int]:
    lines: dict[Path, int] = {}
    arrays: dict[tuple[str, ...], int] = {}  # [[a.b]] header -> how many seen so far
    header: Path = ()
    multiline = None  # the closing quotes of a multi-line string being skipped
    for number, line in enumerate(text.splitlines(), start=1):
        if multiline is not None:
            if multiline in line:
                multiline = None
            continue
        header_match = _HEADER.match(line)
        if header_match and not _KEY.match(line):
            names = tuple(_parts(header_match.group(2)))
            if header_match.group(1) == "[[":
                index = arrays.get(names, 0)
                arrays[names] = index + 1
                header = (*names, index)
            else:
                header = names
            lines.setdefault(header, number)
            continue
        key_match = _KEY.match(line)
        if key_match:
            path: Path = (*header, *_parts(key_match.group(1)))
            for end in range(len(header) + 1, len(path) + 1):
                lines.setdefault(path[:end], number)
            rest = line[key_match.end() :]
            for quotes in ('"""', "'''"):
                if rest.count(quotes) == 1:
                    multiline = quotes
    return lines


def line_of(text: str, loc: Sequence[str | int]) -> int | None:
    """The line the field ``loc`` (a pydantic error location) is written on, or its nearest
    enclosing table's line when the field is missing; None when nothing encloses it."""
    lines = _scan(text)
    path = tuple(loc)
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None
