"""Rows event bodies -> row images (drc.replicator.binlog.rows), on byte literals.

FULL images, MINIMAL ones (columns absent), NULLs, the before and after images of an update,
and corrupt bodies, which raise one named error.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.core.errors import UnsupportedColumnError
from drc.core.events import Op
from drc.replicator.binlog import columns as T
from drc.replicator.binlog.columns import full_bitmap, layout_of
from drc.replicator.binlog.rows import RowDecodeError, decode_rows, full_row
from tests.support.binlog_cases import CASES, column
from tests.support.values import identical


def body(
    count: int, *rows: bytes, present: bytes | None = None, after: bytes | None = None
) -> bytes:
    """A rows event body: column count, columns-present bitmap(s), the row images."""
    bitmap = present if present is not None else full_bitmap(count)
    second = b"" if after is None else after
    return bytes([count]) + bitmap + second + b"".join(rows)


def row(*values: bytes, nulls: int = 0, count: int | None = None) -> bytes:
    width = ((count if count is not None else len(values)) + 7) // 8
    return nulls.to_bytes(width, "little") + b"".join(values)


def decode(columns: list[Any], data: bytes, op: Op = Op.INSERT) -> Any:
    return decode_rows(layout_of("shop", "orders", columns), op, data, 0, len(data))


def test_a_row_of_every_type_with_nulls_between() -> None:
    columns = [
        SimpleNamespace(**{**vars(case[1]), "name": f"c{i}"}) for i, case in enumerate(CASES)
    ]
    nulls = sum(1 << i for i in range(0, len(CASES), 3))
    payload = row(
        *(case[2] for i, case in enumerate(CASES) if not nulls >> i & 1),
        nulls=nulls,
        count=len(CASES),
    )
    [(before, after)] = decode(columns, body(len(CASES), payload))
    assert before is None and list(after) == [f"c{i}" for i in range(len(CASES))]
    for i, case in enumerate(CASES):
        expected = None if nulls >> i & 1 else case[3]
        assert identical(after[f"c{i}"], expected), (case[0], after[f"c{i}"])


def test_unused_null_bitmap_bits_are_ignored() -> None:
    columns = [column(T.LONG, "a"), column(T.LONG, "b")]
    payload = row(b"\x01\0\0\0", b"\x02\0\0\0", nulls=0xFC)  # bits 2-7 are no columns
    assert decode(columns, body(2, payload)) == ((None, {"a": 1, "b": 2}),)


def test_insert_update_and_delete_images() -> None:
    columns = [column(T.LONG, "a")]
    one, two = row(b"\x01\0\0\0"), row(b"\x02\0\0\0")
    assert decode(columns, body(1, one, two), Op.DELETE) == (({"a": 1}, None), ({"a": 2}, None))
    update = body(1, one, two, after=b"\x01")
    assert decode(columns, update, Op.UPDATE) == (({"a": 1}, {"a": 2}),)
    assert decode(columns, body(1), Op.INSERT) == ()


def test_minimal_images_have_every_column_the_absent_ones_none() -> None:
    """binlog_row_image=MINIMAL: the before image holds the key, the after image the changed
    columns; the null bitmap counts present columns only."""
    columns = [column(T.LONG, "id"), column(T.VARCHAR, "v", max_length=10), column(T.LONG, "n")]
    before = row(b"\x07\0\0\0", count=1)
    after = row(b"\x02hi", b"", nulls=0b10, count=2)  # v = 'hi', n = NULL
    images = decode(columns, body(3, before, after, present=b"\x01", after=b"\x06"), Op.UPDATE)
    assert images == (({"id": 7, "v": None, "n": None}, {"id": None, "v": "hi", "n": None}),)
    assert list(images[0][1]) == ["id", "v", "n"]


def test_a_null_in_a_column_drc_cannot_decode_is_fine_a_value_is_not() -> None:
    columns = [column(T.LONG, "id"), column(T.VAR_STRING, "legacy", max_length=10)]
    assert decode(columns, body(2, row(b"\0" * 4, nulls=0b10))) == (
        (None, {"id": 0, "legacy": None}),
    )
    with pytest.raises(UnsupportedColumnError, match=r"'legacy' of shop\.orders"):
        decode(columns, body(2, row(b"\0" * 4, b"\x01a")))


@pytest.mark.parametrize(
    ("columns", "data", "why"),
    [
        ([column(T.VARCHAR, "v", max_length=10)], body(1, row(b"\x09abc")), "past the event"),
        ([column(T.LONG, "a")], body(1, row(b"\x01\0\0")), "unpack_from"),
        ([column(T.LONG, "a")], body(1, row(b"\x01\0\0\0", b"\0")), "unpack_from"),
        ([column(T.VARCHAR, "v", max_length=10, character_set_name="utf8mb4")],
         body(1, row(b"\x02\xff\xfe")), "UnicodeDecodeError"),
        ([column(T.ENUM, "e", size=1, enum_values=["", "a"])], body(1, row(b"\x05")), "IndexError"),
        ([column(T.NEWDECIMAL, "d", precision=1, decimals=0)], body(1, row(b"\x00")),
         "out of range"),
        ([column(T.LONG, "a")], b"\xff" + body(1), "length-encoded integer"),
        ([column(T.LONG, "a")], body(1, b"\0", present=b"\0"), "no column present"),
    ],
    ids=["string", "short int", "trailing byte", "utf8", "enum index", "decimal", "count",
         "no column present"],
)  # fmt: skip
def test_corrupt_bodies_raise_one_named_error(columns: list[Any], data: bytes, why: str) -> None:
    with pytest.raises(RowDecodeError, match=rf"shop\.orders does not decode.*{why}"):
        decode(columns, data)


ANY_COLUMN = [case[1] for case in CASES] + [column(T.VAR_STRING, max_length=10)]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(ANY_COLUMN), min_size=1, max_size=6), st.binary(max_size=48))
def test_any_bytes_decode_or_raise_a_named_error(columns: list[Any], raw: bytes) -> None:
    named = [SimpleNamespace(**{**vars(col), "name": f"c{i}"}) for i, col in enumerate(columns)]
    for op in Op.INSERT, Op.UPDATE:
        try:
            images = decode(named, body(len(named), raw, after=full_bitmap(len(named))), op)
        except (RowDecodeError, UnsupportedColumnError):
            continue
        assert all(
            list(image) == [c.name for c in named] for pair in images for image in pair if image
        )


def test_full_row_reads_from_an_offset_and_says_where_it_ends() -> None:
    layout = layout_of(
        "shop", "orders", [column(T.LONG, "a"), column(T.VARCHAR, "b", max_length=9)]
    )
    data = b"junk" + row(b"\x05\0\0\0", b"\x02hi") + b"more"
    assert full_row(layout, data, 4) == ({"a": 5, "b": "hi"}, len(data) - 4)
