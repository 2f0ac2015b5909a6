"""Exact value decoding: the pieces testable without a server."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from drc.core.errors import UnsupportedColumnError
from drc.core.values import ZeroDate
from drc.replicator import decoding


def test_unknown_column_type_names_table_and_column(monkeypatch: pytest.MonkeyPatch) -> None:
    def library_gives_up(*_args: object) -> None:
        raise NotImplementedError("Unknown MySQL column type: 250")

    monkeypatch.setattr(decoding, "_ORIGINAL", library_gives_up)
    column = SimpleNamespace(type=250, name="mystery")
    event = SimpleNamespace(schema="shop", table="orders")
    with pytest.raises(UnsupportedColumnError, match=r"'mystery' of shop\.orders"):
        decoding._delegate(event, column)


@pytest.mark.parametrize(
    ("parts", "fsp", "text"),
    [
        ((0, 0, 0, 0, 0, 0, 0), 0, "0000-00-00 00:00:00"),
        ((0, 0, 0, 0, 0, 0, 0), 6, "0000-00-00 00:00:00.000000"),
        ((2020, 0, 15, 10, 11, 12, 500000), 1, "2020-00-15 10:11:12.5"),
    ],
)
def test_invalid_datetimes_keep_their_text(parts: tuple[int, ...], fsp: int, text: str) -> None:
    assert decoding._datetime_or_zero(*parts, fsp) == ZeroDate(text)


def test_valid_datetime_stays_a_datetime() -> None:
    value = decoding._datetime_or_zero(2024, 2, 29, 1, 2, 3, 4, 6)
    assert value.isoformat() == "2024-02-29T01:02:03.000004"
