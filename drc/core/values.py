"""Python types of column values, and the two small types Python lacks.

Every row value DRC carries is one of these; the codec round-trips each exactly (type and value),
and rejects anything else with UnsupportedValueError.

    MySQL/MariaDB type            Python value
    ----------------------------  ------------------------------------------------------------
    NULL                          None
    TINYINT .. BIGINT [UNSIGNED]  int, -2**63 .. 2**64-1
    YEAR                          int
    BOOL (TINYINT(1))             int (the binlog has no boolean; bool is accepted and kept)
    BIT(1..64)                    Bit(value, width)
    DECIMAL(M,D), M<=65, D<=30    decimal.Decimal, exact: digits, exponent and sign of zero kept;
                                  NaN and Infinity are rejected (MySQL cannot store them)
    FLOAT, DOUBLE                 float (bit-exact, -0.0 included)
    DATE                          datetime.date
    DATETIME(0..6), TIMESTAMP     datetime.datetime, naive, with microseconds; an aware datetime
                                  keeps its UTC offset (as a fixed offset, not the zone name)
    zero or partial dates         ZeroDate(text), e.g. '0000-00-00', '2020-00-15 10:00:00'
    TIME(0..6)                    datetime.timedelta, negative and > 24 h allowed
                                  (MySQL range -838:59:59.999999 .. 838:59:59.999999)
    CHAR, VARCHAR, TEXT           str (utf8mb4 incl. 4-byte characters; latin1 etc. decoded)
    BINARY, VARBINARY, BLOB       bytes
    GEOMETRY                      bytes (the WKB with the 4-byte SRID prefix, as MySQL stores it)
    ENUM                          str (the member's text, not its index)
    SET                           frozenset[str] of member texts
    JSON                          str on MariaDB (JSON is LONGTEXT there), or the parsed
                                  document on MySQL: dict / list / str / int / float / bool / None

Value types raise ValueError for arguments that describe no valid value; adapters that build them
from binlog data translate that at their boundary.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

_ZERO_DATE = re.compile(
    r"(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})"
    r"( (?P<hh>\d{2}):(?P<mi>\d{2}):(?P<ss>\d{2})(\.\d{1,6})?)?",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class ZeroDate:
    """A DATE/DATETIME/TIMESTAMP MySQL accepts but ``datetime.date`` cannot hold.

    The text is kept exactly as MySQL printed it (``'0000-00-00'``,
    ``'0000-00-00 00:00:00.000000'``, ``'2020-00-15'``), so applying it writes back the same value.
    A text that *is* a valid Python date or datetime is rejected: it must travel as
    ``date``/``datetime`` so every value has one representation.
    """

    text: str

    def __post_init__(self) -> None:
        if type(self.text) is not str:
            raise ValueError(f"ZeroDate text must be str, got {type(self.text).__name__}")
        match = _ZERO_DATE.fullmatch(self.text)
        if match is None:
            raise ValueError(
                f"ZeroDate text {self.text!r} is not 'YYYY-MM-DD' or 'YYYY-MM-DD hh:mm:ss[.ffffff]'"
            )
        if _fits_python(match):
            raise ValueError(
                f"ZeroDate text {self.text!r} is a valid date; pass a date or datetime instead"
            )

    def __str__(self) -> str:
        return self.text


def _fits_python(match: re.Match[str]) -> bool:
    year, month, day = int(match["y"]), int(match["m"]), int(match["d"])
    try:
        dt.date(year, month, day)
    except ValueError:
        return False
    if match["hh"] is None:
        return True
    hour, minute, second = int(match["hh"]), int(match["mi"]), int(match["ss"])
    return hour < 24 and minute < 60 and second < 60


@dataclass(frozen=True, slots=True)
class Bit:
    """A BIT(width) value: ``0 <= value < 2**width``, width 1..64.

    The width is kept because b'1' in BIT(1) and BIT(8) are different column values to MySQL.
    """

    value: int
    width: int

    def __post_init__(self) -> None:
        if type(self.width) is not int or not 1 <= self.width <= 64:
            raise ValueError(f"Bit width must be an int in 1..64, got {self.width!r}")
        if type(self.value) is not int or not 0 <= self.value < 2**self.width:
            raise ValueError(
                f"Bit value {self.value!r} does not fit BIT({self.width}): "
                f"must be an int in 0..{2**self.width - 1}"
            )


# ---------------------------------------------------------------------------- normalising
# The one place DRC's values are put into another form: read back from a driver (conflict log,
# pre-fetched rows), bound for the target (apply), compared, or ordered as instants (lww).


def normalized(value: Any) -> Any:
    """A value as a driver (pymysql) read it, in DRC's value types: a SET's ``set`` as a
    frozenset, bytearray/memoryview as bytes, a ``datetime.time`` as the timedelta TIME is
    (it may exceed 24 h); anything else as it is."""
    if isinstance(value, set):
        return frozenset(value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dt.time):
        return dt.timedelta(
            hours=value.hour, minutes=value.minute, seconds=value.second,
            microseconds=value.microsecond,
        )  # fmt: skip
    return value


def utc_naive(value: dt.datetime) -> dt.datetime:
    """An aware datetime as naive UTC (DRC's target sessions run in UTC); naive ones as they are."""
    return value if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)


def utc_aware(value: dt.datetime) -> dt.datetime:
    """A datetime as an aware one in UTC; a naive one is taken to be UTC already."""
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def bound(value: Any) -> Any:
    """The value a MySQL driver binds for a DRC column value: ZeroDate -> its text, Bit -> int,
    SET (frozenset) -> comma-joined sorted members, JSON documents (dict/list) -> JSON text, an
    aware datetime -> naive UTC, bytearray/memoryview -> bytes. bytes, Decimal, naive datetime,
    date, timedelta, int, float, str and None pass as they are."""
    kind = type(value)
    if kind in _PASS:
        return value
    if kind is ZeroDate:
        return value.text
    if kind is Bit:
        return value.value
    if kind is frozenset:
        return ",".join(sorted(value))
    if kind is dict or kind is list:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if kind is dt.datetime and value.tzinfo is not None:
        return utc_naive(value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value  # Decimal, date, naive datetime, timedelta: drivers render them exactly


_PASS = frozenset({type(None), int, float, str, bytes, bool})
# The types bound() returns as they are: a caller binding many values skips the call for them.
BOUND_AS_IS: frozenset[type] = _PASS


_FLT_MAX = 3.4028234663852886e38


def single_precision(value: float) -> float:
    """The double that a FLOAT (single-precision) column holds for ``value``: the captured
    value is the shortest decimal naming the single (1.1 for 1.1f), whose double differs.
    A value beyond FLOAT's range is stored as its largest value (sql_mode not strict)."""
    try:
        return _single(value)
    except OverflowError:
        return math.copysign(_FLT_MAX, value)


def _single(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def shortest_single(value: float) -> float:
    """The shortest decimal naming the single-precision value of ``value`` (0.1 for
    0.10000000149011612), the closest to it among equally short ones: the form the capture
    gives a FLOAT (drc.replicator.binlog.values), so a FLOAT read back from the target as a double
    equals the captured value. -0.0 stays -0.0."""
    single = single_precision(value)
    if single == 0.0:
        return single
    exact = Decimal(single)
    for digits in range(1, 10):
        nearest = Decimal(f"{single:.{digits - 1}e}")
        step = Decimal(1).scaleb(nearest.adjusted() - digits + 1)
        # Below a power of two the single's lower neighbour is half as far as the upper one,
        # so the nearest decimal may name another single while the next one up names it.
        naming = [c for c in (nearest, nearest + step, nearest - step) if _names(c, single)]
        if naming:
            return float(min(naming, key=lambda c: abs(c - exact)))
    return single


def _names(decimal: Decimal, single: float) -> bool:
    try:
        return _single(float(decimal)) == single
    except OverflowError:  # past the largest single
        return False


def _comparable(value: Any) -> Any:
    """One form for the stream's and pymysql's versions of a value (:func:`normalized`, then
    what a driver cannot tell apart: an instant, BIT's bytes, a zero date's text)."""
    value = normalized(value)
    if isinstance(value, dt.datetime):
        return utc_naive(value)
    if isinstance(value, Bit):  # pymysql reads BIT as big-endian bytes
        return value.value.to_bytes((value.width + 7) // 8, "big")
    if isinstance(value, ZeroDate):
        return value.text
    return value


def same_value(a: Any, b: Any) -> bool:
    """Equal values, whether read by pymysql or decoded from the stream (naive UTC vs aware
    datetime, BIT bytes vs Bit, SET text vs frozenset)."""
    a, b = _comparable(a), _comparable(b)
    if isinstance(a, frozenset) and isinstance(b, str):
        b = _set_members(b)
    elif isinstance(b, frozenset) and isinstance(a, str):
        a = _set_members(a)
    if a is None or b is None:
        return a is b
    return bool(a == b)


def _set_members(text: str) -> frozenset[str]:
    return frozenset(text.split(",")) if text else frozenset()
