"""Content negotiation for ``GET /v1/events``: which of the offered media types the ``Accept``
header asks for (RFC 9110 section 12.5.1). Pure.

Each media range ``type/subtype`` (or ``type/*``, ``*/*``) may carry parameters and a weight
``q`` (0 to 1, default 1; ``q=0`` means "not acceptable"). An offered type takes the weight of
the most specific range that matches it (``type/subtype`` over ``type/*`` over ``*/*``); other
parameters do not affect matching. The offered type with the highest weight above 0 wins; on a
tie, or without an Accept header, the first offered type (JSON). A range that does not parse
(no ``/``, a bad ``q``) is ignored; if nothing offered is acceptable the caller answers 406.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_RANGE = re.compile(rf"\s*({_TOKEN})/({_TOKEN})\s*", re.ASCII)
_QVALUE = re.compile(r"(0(\.[0-9]{0,3})?|1(\.0{0,3})?)", re.ASCII)
MAX_RANGES = 64  # more is not a real client; the rest are ignored


@dataclass(frozen=True, slots=True)
class MediaRange:
    type: str
    subtype: str
    q: float

    def specificity(self, media: str) -> int:
        """How closely this range matches ``media`` (3 exact .. 1 ``*/*``), 0 if not at all."""
        kind, _, sub = media.partition("/")
        if self.type == "*":
            return 1 if self.subtype == "*" else 0
        if self.type != kind:
            return 0
        if self.subtype == "*":
            return 2
        return 3 if self.subtype == sub else 0


def parse_accept(header: str) -> list[MediaRange]:
    """The media ranges of an Accept header, malformed ones left out."""
    ranges = []
    for part in header.split(",")[:MAX_RANGES]:
        found = _parse_range(part)
        if found is not None:
            ranges.append(found)
    return ranges


def _parse_range(text: str) -> MediaRange | None:
    media, *params = text.split(";")
    match = _RANGE.fullmatch(media)
    if match is None:
        return None
    kind, sub = match[1].lower(), match[2].lower()
    if kind == "*" and sub != "*":
        return None
    q = 1.0
    for param in params:
        name, eq, value = param.strip().partition("=")
        if name.strip().lower() != "q":
            continue  # a media type parameter or accept extension: no effect on matching
        if not eq or not _QVALUE.fullmatch(value.strip()):
            return None
        q = float(value.strip())
        break  # RFC: parameters after q are accept-extensions
    return MediaRange(kind, sub, q)


def choose(header: str | None, offered: Sequence[str]) -> str | None:
    """The offered media type to answer with, None if the header accepts none of them."""
    if header is None or not header.strip():
        return offered[0]
    ranges = parse_accept(header)
    best, best_q = None, 0.0
    for media in offered:
        q = _weight(ranges, media.lower())
        if q > best_q:  # strictly greater: ties keep the earlier (preferred) type
            best, best_q = media, q
    return best


def _weight(ranges: Sequence[MediaRange], media: str) -> float:
    q, closest = 0.0, 0
    for candidate in ranges:
        specificity = candidate.specificity(media)
        if specificity > closest:
            q, closest = candidate.q, specificity
    return q
