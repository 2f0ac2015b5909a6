"""The one-pass prototype (drc.replicator.binlog.rowpack) writes exactly the bytes the codec
writes for the row the decoder reads: every type of the shared cases, NULLs, and generated
integers, decimals and DATETIME2 values (valid, zero and impossible ones)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from drc.core.events import Op
from drc.core.value_codec import pack
from drc.replicator.binlog import columns as T
from drc.replicator.binlog.columns import full_bitmap, layout_of
from drc.replicator.binlog.rowpack import keys_of, pack_full_row, pack_int, pack_rows
from drc.replicator.binlog.rows import decode_rows, full_row
from tests.support.binlog_cases import CASES, column, datetime2_bytes, pack_decimal


def same_bytes(columns: list[Any], image: bytes) -> None:
    layout = layout_of("shop", "orders", columns)
    row, end = full_row(layout, image, 0)
    assert pack_full_row(layout, keys_of(layout), image, 0) == (pack(row), end)


def test_every_case_alone_and_all_in_one_row_with_nulls() -> None:
    for _, col, raw, _ in CASES:
        same_bytes([col], b"\x00" + raw)
        same_bytes([col], b"\x01")  # NULL
    columns = [
        SimpleNamespace(**{**vars(case[1]), "name": f"c{i}"}) for i, case in enumerate(CASES)
    ]
    nulls = sum(1 << i for i in range(0, len(CASES), 4))
    values = b"".join(case[2] for i, case in enumerate(CASES) if not nulls >> i & 1)
    same_bytes(columns, nulls.to_bytes((len(CASES) + 7) // 8, "little") + values)


def test_a_rows_event_packs_as_the_decoded_images() -> None:
    columns = [column(T.LONG, "id"), column(T.VARCHAR, "v", max_length=20)]
    layout = layout_of("shop", "orders", columns)
    image = b"\x00\x07\x00\x00\x00\x02hi"
    data = bytes([2]) + full_bitmap(2) + full_bitmap(2) + image + image
    decoded = decode_rows(layout, Op.UPDATE, data, 0, len(data))
    packed = pack_rows(layout, keys_of(layout), Op.UPDATE, data, 0, len(data))
    assert packed == [(pack(before), pack(after)) for before, after in decoded]


@given(st.integers(-(2**63), 2**64 - 1))
def test_integers_pack_as_msgpack_packs_them(value: int) -> None:
    assert pack_int(value) == msgpack.packb(value)


@given(st.data())
def test_decimals(data: st.DataObject) -> None:
    precision = data.draw(st.integers(1, 65))
    decimals = data.draw(st.integers(0, min(precision, 30)))
    digits = data.draw(st.text("0123456789", min_size=precision, max_size=precision))
    tiny = data.draw(st.booleans())
    if tiny:  # zero or a few digits at the far end of the fraction: Decimal's exponent form
        digits = "0" * (precision - 2) + digits[-2:] if precision > 2 else digits
    sign = data.draw(st.sampled_from(["", "-"]))
    whole, fraction = digits[: precision - decimals], digits[precision - decimals :]
    text = f"{sign}{whole or '0'}" + (f".{fraction}" if decimals else "")
    col = column(T.NEWDECIMAL, precision=precision, decimals=decimals)
    same_bytes([col], b"\x00" + pack_decimal(text, precision, decimals))


@given(
    st.integers(0, 9999), st.integers(0, 12), st.integers(0, 31), st.integers(0, 31),
    st.integers(0, 63), st.integers(0, 63), st.integers(0, 6), st.integers(0, 999999),
)  # fmt: skip
def test_datetime2(y: int, mo: int, d: int, h: int, mi: int, s: int, fsp: int, us: int) -> None:
    size = (fsp + 1) // 2
    stored = us // 10 ** (6 - fsp) * (10 if fsp % 2 else 1)
    raw = datetime2_bytes(y, mo, d, h, mi, s) + (stored.to_bytes(size, "big") if size else b"")
    same_bytes([column(T.DATETIME2, fsp=fsp)], b"\x00" + raw)
