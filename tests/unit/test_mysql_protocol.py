"""drc.mysql.protocol on byte literals: COM_QUERY framing, OK/ERR/EOF packets, result sets read
and converted as pymysql converts them, replies in sequence, and the greeting's TLS flag."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pymysql
import pytest
from pymysql import converters
from pymysql.constants import CLIENT, FIELD_TYPE

from drc.mysql import protocol
from drc.mysql.protocol import Reply, ServerError, Wire, WireError


def packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes((seq,)) + payload


def lenenc(text: bytes) -> bytes:
    assert len(text) < 251
    return bytes((len(text),)) + text


def column(name: str, type_code: int, charset: int = 45) -> bytes:
    """A column definition as MariaDB sends it (catalog "def", db.t)."""
    names = b"".join(lenenc(n) for n in (b"def", b"db", b"t", b"t", name.encode(), name.encode()))
    fixed = charset.to_bytes(2, "little") + (11).to_bytes(4, "little") + bytes((type_code,))
    return names + b"\x0c" + fixed + b"\x00\x00" + b"\x00" + b"\x00\x00"


EOF = b"\xfe\x00\x00\x22\x00"  # no warnings, status 0x22 (autocommit off, in transaction...)
OK_5 = b"\x00\x05\x00\x02\x00\x00\x00"  # 5 affected rows, insert id 0, status 2, no warnings


def wire_on(replies: bytes) -> tuple[Wire, list[bytes]]:
    sent: list[bytes] = []
    return Wire(sent.append, io.BytesIO(replies), converters.decoders, "utf8"), sent


def test_a_query_is_one_packet_numbered_zero_and_its_reply_starts_at_one() -> None:
    assert protocol.command("SELECT 1") == (b"\x09\x00\x00\x00\x03SELECT 1", 1)
    assert protocol.command("SELECT 'é'")[0][:4] == b"\x0c\x00\x00\x00"  # utf-8 bytes counted


def test_a_payload_of_the_maximum_size_or_more_is_split_and_ends_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(protocol, "MAX_PAYLOAD", 4)
    assert protocol.command("abcdefg") == (
        b"\x04\x00\x00\x00\x03abc" + b"\x04\x00\x00\x01defg" + b"\x00\x00\x00\x02",
        3,
    )
    assert protocol.command("abcde") == (b"\x04\x00\x00\x00\x03abc" + b"\x02\x00\x00\x01de", 2)


def test_commands_go_out_in_one_write_and_replies_are_read_in_order() -> None:
    wire, sent = wire_on(packet(1, OK_5) + packet(1, b"\x00\x00\x00\x02\x00\x00\x00"))
    wire.send(["UPDATE t SET v = 1", "SAVEPOINT x"])
    assert sent == [b"\x13\x00\x00\x00\x03UPDATE t SET v = 1\x0c\x00\x00\x00\x03SAVEPOINT x"]
    assert wire.unread == 2
    assert wire.receive() == Reply(5, status=2)
    assert wire.receive() == Reply(0, status=2)
    assert wire.unread == 0


@pytest.mark.parametrize(
    ("affected", "count"),
    [(b"\x05", 5), (b"\xfc\x2c\x01", 300), (b"\xfd\x40\x42\x0f", 1_000_000),
     (b"\xfe" + (2**40).to_bytes(8, "little"), 2**40)],
)  # fmt: skip
def test_an_ok_packet_gives_its_length_encoded_affected_rows(affected: bytes, count: int) -> None:
    wire, _ = wire_on(packet(1, b"\x00" + affected + b"\xfd\x70\x11\x01" + b"\x03\x00\x00\x00"))
    wire.send(["DELETE FROM t"])
    assert wire.receive() == Reply(count, status=3)


def test_length_encoded_integers_of_each_width() -> None:
    assert protocol.lenenc_int(b"\xfa", 0) == (250, 1)
    assert protocol.lenenc_int(b"\xfc\x01\x02", 0) == (0x0201, 3)
    assert protocol.lenenc_int(b"\xfd\x01\x02\x03", 0) == (0x030201, 4)
    assert protocol.lenenc_int(b"\xfe" + (2**40).to_bytes(8, "little"), 0) == (2**40, 9)
    with pytest.raises(WireError):
        protocol.lenenc_int(b"\xff", 0)


def test_an_error_reply_is_returned_with_its_code_and_message_and_the_next_is_read() -> None:
    err = b"\xff\x26\x04#23000Duplicate entry '1' for key 'PRIMARY'"
    wire, _ = wire_on(packet(1, err) + packet(1, OK_5))
    wire.send(["INSERT INTO t VALUES (1)", "UPDATE t SET v = 2"])
    failed = wire.receive()
    assert isinstance(failed, ServerError)
    assert failed.args == (1062, "Duplicate entry '1' for key 'PRIMARY'")
    assert wire.receive() == Reply(5, status=2)


def test_an_error_without_sqlstate_keeps_its_whole_message() -> None:
    wire, _ = wire_on(packet(1, b"\xff\xb5\x04Lock wait timeout exceeded"))
    wire.send(["UPDATE t SET v = 1"])
    assert wire.receive().args == (1205, "Lock wait timeout exceeded")


def test_a_result_set_is_read_and_converted_as_pymysql_converts_it() -> None:
    columns = [
        column("id", FIELD_TYPE.LONGLONG, 63), column("v", FIELD_TYPE.VAR_STRING),
        column("b", FIELD_TYPE.VAR_STRING, 63), column("d", FIELD_TYPE.NEWDECIMAL, 63),
        column("t", FIELD_TYPE.DATETIME, 63), column("j", FIELD_TYPE.JSON, 63),
    ]  # fmt: skip
    rows = [
        lenenc(b"1") + lenenc("é🎉".encode()) + lenenc(b"\x00\xff") + lenenc(b"-0.50")
        + lenenc(b"2024-01-02 03:04:05.000006") + lenenc(b'{"a":1}'),
        lenenc(b"2") + b"\xfb" + b"\xfb" + b"\xfb" + b"\xfb" + b"\xfb",
    ]  # fmt: skip
    stream = [b"\x06", *columns, EOF, *rows, EOF]
    wire, _ = wire_on(b"".join(packet(seq + 1, p) for seq, p in enumerate(stream)))
    wire.send(["SELECT * FROM t"])
    assert wire.receive() == Reply(
        2,
        (
            (1, "é🎉", b"\x00\xff", Decimal("-0.50"), dt.datetime(2024, 1, 2, 3, 4, 5, 6),
             '{"a":1}'),
            (2, None, None, None, None, None),
        ),
        ("id", "v", "b", "d", "t", "j"),
        0x22,
    )  # fmt: skip


def test_an_error_mid_rows_is_the_reply() -> None:
    stream = [b"\x01", column("id", FIELD_TYPE.LONG, 63), EOF, lenenc(b"1"), b"\xff\xcd\x04x"]
    wire, _ = wire_on(b"".join(packet(seq + 1, p) for seq, p in enumerate(stream)))
    wire.send(["SELECT id FROM t FOR UPDATE"])
    assert wire.receive().args == (1229, "x")


def test_the_text_types_are_pymysqls() -> None:
    """Which types are text (or bytes in a binary charset): the library's rule, pinned here."""
    assert protocol.TEXT_TYPES == pymysql.connections.TEXT_TYPES
    assert protocol.JSON == FIELD_TYPE.JSON and protocol.CLIENT_SSL == CLIENT.SSL


@pytest.mark.parametrize(
    "replies",
    [
        packet(2, OK_5),  # out of sequence: another command's reply
        packet(1, OK_5)[:6],  # cut short: the server went away
        b"",  # nothing at all
        packet(1, b"\xfb/etc/passwd"),  # LOAD DATA LOCAL: never answered
    ],
)
def test_a_reply_that_cannot_be_read_leaves_the_wire_unusable(replies: bytes) -> None:
    wire, _ = wire_on(replies)
    wire.send(["UPDATE t SET v = 1"])
    with pytest.raises(WireError):
        wire.receive()


def test_a_reply_split_in_full_packets_is_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "MAX_PAYLOAD", 4)
    wire, _ = wire_on(packet(1, b"\xff\x26\x04a") + packet(2, b"bc"))
    wire.send(["x"])  # one packet out (a payload of 2 bytes): the reply starts at 1
    assert wire.receive().args == (1062, "abc")


GREETING = b"\x0a" + b"5.5.5-10.11.6-MariaDB-log\x00" + b"\x2a\x00\x00\x00" + b"12345678" + b"\x00"


@pytest.mark.parametrize(
    ("flags", "offers"),
    [(b"\xfe\xff", True), (b"\xfe\xf7", False)],  # 0x0800: CLIENT_SSL
)
def test_the_greeting_says_whether_the_server_offers_tls(flags: bytes, offers: bool) -> None:
    data = packet(0, GREETING + flags + b"\x2d\x02\x00" + b"\xff\x81")
    capabilities = protocol.greeting_capabilities(data)
    assert capabilities is not None and bool(capabilities & protocol.CLIENT_SSL) is offers
    assert protocol.greeting_capabilities(data[:20]) is None  # not all there yet


def test_an_error_in_place_of_the_greeting_offers_nothing() -> None:
    assert protocol.greeting_capabilities(packet(0, b"\xff\x10\x04Too many connections")) == 0
