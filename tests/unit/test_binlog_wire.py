"""MySQL packets of the replication connection (drc.replicator.binlog.wire.Frames), on bytes."""

from __future__ import annotations

import io

import pymysql
import pytest

from drc.replicator.binlog.wire import Frames


def frame(payload: bytes, seq: int) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


def frames(*packets: bytes) -> Frames:
    return Frames(io.BufferedReader(io.BytesIO(b"".join(packets))))  # type: ignore[arg-type]


def test_events_in_order_then_the_end_of_the_binlog() -> None:
    stream = frames(frame(b"\0first", 2), frame(b"\0second", 3), frame(b"\xfe\0\0\x02\0", 4))
    assert (stream.next(), stream.next(), stream.next()) == (b"\0first", b"\0second", None)


def test_a_payload_of_16_mib_goes_on_in_the_next_packet() -> None:
    big = b"\0" + b"x" * (0xFFFFFF - 1)
    stream = frames(frame(big, 1), frame(b"tail", 2), frame(b"\0next", 3))
    assert stream.next() == big + b"tail" and stream.next() == b"\0next"


def test_an_eof_marker_is_only_a_short_0xfe_payload() -> None:
    long_fe = b"\xfe" + b"\0" * 9  # 10 bytes: not the end (and no event either: skipped)
    assert frames(frame(long_fe, 1), frame(b"\0ev", 2)).next() == b"\0ev"


def test_an_error_packet_raises_pymysql_error_with_its_code() -> None:
    error = b"\xff" + (1236).to_bytes(2, "little") + b"#HY000" + b"Could not find GTID state"
    with pytest.raises(pymysql.err.OperationalError) as raised:
        frames(frame(error, 1)).next()
    assert raised.value.args[0] == 1236 and "GTID state" in raised.value.args[1]


def test_a_sequence_gap_is_an_error_and_sequence_zero_a_lost_connection() -> None:
    with pytest.raises(pymysql.err.InternalError, match="got 5 expected 2"):
        stream = frames(frame(b"\0a", 1), frame(b"\0b", 5))
        stream.next()
        stream.next()
    with pytest.raises(pymysql.err.OperationalError, match="Lost connection"):
        stream = frames(frame(b"\0a", 1), frame(b"\xff\x01\x02", 0))
        stream.next()
        stream.next()
    wrapped = frames(frame(b"\0a", 255), frame(b"\0b", 0))  # 255 wraps to 0
    assert (wrapped.next(), wrapped.next()) == (b"\0a", b"\0b")


@pytest.mark.parametrize("cut", [2, 6])
def test_a_connection_cut_mid_packet_is_a_lost_connection(cut: int) -> None:
    data = frame(b"\0event", 1)[:cut]
    with pytest.raises(pymysql.err.OperationalError, match="Lost connection") as raised:
        frames(data).next()
    assert raised.value.args[0] == 2013


def test_a_socket_error_is_a_lost_connection_caused_by_it() -> None:
    class Broken(io.RawIOBase):
        def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
            raise TimeoutError("timed out")

        def readable(self) -> bool:
            return True

    with pytest.raises(pymysql.err.OperationalError, match=r"\(timed out\)") as raised:
        Frames(io.BufferedReader(Broken())).next()
    assert isinstance(raised.value.__cause__, TimeoutError)
