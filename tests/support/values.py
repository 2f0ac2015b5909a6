"""Exact values for the binlog decoder tests: MySQL's TIME2 bytes built as the server stores them,
and identity stricter than == (same type, floats bit for bit, Decimal digits and exponent)."""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Decimal
from typing import Any


def time2_bytes(text: str, fsp: int) -> bytes:
    """MySQL's TIME_to_longlong_time_packed + my_time_packed_to_binary, C arithmetic included.

    ``text`` is '[-]H:MM:SS[.ffffff]' with at most ``fsp`` fraction digits.
    """
    negative, body = text.startswith("-"), text.lstrip("-")
    hms, _, digits = body.partition(".")
    assert len(digits) <= fsp
    hour, minute, second = (int(p) for p in hms.split(":"))
    micro = int(digits.ljust(6, "0")) if digits else 0
    nr = ((hour << 12 | minute << 6 | second) << 24) + micro  # MY_PACKED_TIME_MAKE
    nr = -nr if negative else nr
    int_part = nr >> 24  # MY_PACKED_TIME_GET_INT_PART: an arithmetic shift
    frac_part = int(math.fmod(nr, 1 << 24))  # MY_PACKED_TIME_GET_FRAC_PART: C's %, dividend sign
    head = (0x800000 + int_part).to_bytes(3, "big")
    if fsp == 0:
        return head
    if fsp <= 2:
        return head + (int(frac_part / 10000) & 0xFF).to_bytes(1, "big")  # C division truncates
    if fsp <= 4:
        return head + (int(frac_part / 100) & 0xFFFF).to_bytes(2, "big")
    return (nr + 0x800000000000).to_bytes(6, "big")  # mi_int6store(nr + TIMEF_OFS)


def time2_value(text: str) -> dt.timedelta:
    negative, body = text.startswith("-"), text.lstrip("-")
    hms, _, digits = body.partition(".")
    hour, minute, second = (int(p) for p in hms.split(":"))
    micro = int(digits.ljust(6, "0")) if digits else 0
    value = dt.timedelta(hours=hour, minutes=minute, seconds=second, microseconds=micro)
    return -value if negative else value


TIME2_CASES: list[tuple[str, int]] = [
    *((t, fsp) for fsp in range(7) for t in ("00:00:00", "-00:00:01", "00:00:01", "-838:59:59")),
    *((t, fsp) for fsp in range(7) for t in ("838:59:59", "-01:00:00", "-12:34:56", "100:00:00")),
    ("-00:00:00.5", 1), ("-00:00:00.1", 1), ("-838:59:59.9", 1), ("838:59:59.9", 1),
    ("100:00:00.5", 1), ("-100:00:00.5", 1), ("-00:00:00.5", 6), ("-01:00:00.9", 1),
    ("-00:00:00.01", 2), ("-00:00:00.99", 2), ("-12:34:56.78", 2), ("838:59:59.99", 2),
    ("-00:00:00.001", 3), ("-00:00:00.5", 3), ("-838:59:59.999", 3), ("12:34:56.123", 3),
    ("-00:00:00.0001", 4), ("-01:02:03.0004", 4), ("-838:59:59.9999", 4), ("00:00:00.9999", 4),
    ("-00:00:00.00001", 5), ("-00:00:00.5", 5), ("-838:59:59.99999", 5), ("1:2:3.45678", 5),
    ("-00:00:00.000001", 6), ("-01:00:00.000001", 6), ("-838:59:59.999999", 6),
    ("838:59:59.999999", 6), ("-00:00:00.999999", 6), ("-00:00:01.000001", 6),
    ("-23:59:59.5", 6), ("00:00:00.000001", 6),
]  # fmt: skip


def identical(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
