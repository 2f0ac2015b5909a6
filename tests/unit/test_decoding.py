"""Exact value decoding: the pieces testable without a server."""

from __future__ import annotations

import datetime as dt
import io
from types import SimpleNamespace

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from drc.core.errors import UnsupportedColumnError
from drc.core.values import ZeroDate
from drc.replicator import decoding
from tests.support.values import TIME2_CASES, time2_bytes, time2_value


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


# --- TIME2: one big-endian number over integer and fraction bytes -----------------------------


def test_time2_encoder_matches_mysql_bytes() -> None:
    """Anchors for the encoder above, worked out by hand from my_time_packed_to_binary."""
    assert time2_bytes("-01:00:00.000001", 6) == bytes.fromhex("7fefff ffffff")
    assert time2_bytes("-00:00:00.5", 1) == bytes.fromhex("7fffff ce")
    assert time2_bytes("-00:00:00.001", 3) == bytes.fromhex("7fffff fff6")
    assert time2_bytes("100:00:00.5", 1) == bytes.fromhex("864000 32")
    assert time2_bytes("-838:59:59", 0) == bytes.fromhex("4b9105")
    assert time2_bytes("00:00:00", 6) == bytes.fromhex("800000 000000")


@pytest.mark.parametrize(("text", "fsp"), TIME2_CASES, ids=[f"{t}({f})" for t, f in TIME2_CASES])
def test_time2_decodes_the_stored_value(text: str, fsp: int) -> None:
    raw = time2_bytes(text, fsp)
    frac_bytes, unit = decoding.time2_layout(fsp)
    assert len(raw) == 3 + frac_bytes
    assert decoding.time2(raw, frac_bytes, unit) == time2_value(text)
    # the per-value override reads exactly the value's bytes from the event's packet
    packet = io.BytesIO(raw + b"\xaa")
    column = SimpleNamespace(type=FIELD_TYPE.TIME2, fsp=fsp, name="t")
    value = decoding._exact_value(SimpleNamespace(packet=packet), column)
    assert type(value) is dt.timedelta and value == time2_value(text)
    assert packet.read() == b"\xaa"


def test_negative_fractional_time_is_not_the_library_value() -> None:
    raw = time2_bytes("-01:00:00.000001", 6)
    assert decoding.time2(raw, 3, 1) == -dt.timedelta(hours=1, microseconds=1)
    assert decoding.time2(raw, 3, 1) != -dt.timedelta(hours=1, microseconds=999999)
