"""SCN: order, the order-preserving bytes, the text form and its errors."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.core.errors import MalformedScnError
from drc.core.scn import SCN, SCN_BYTES, U32_MAX, U64_MAX, ZERO_SCN

u32 = st.integers(0, U32_MAX)
u64 = st.integers(0, U64_MAX)
# Small ranges too, so that equal fields (and ties broken by later fields) actually occur.
small = st.integers(0, 3)
scns = st.builds(SCN, u32 | small, u32 | small, u32 | small, u64 | small)

FAST = settings(max_examples=300, deadline=None)


@FAST
@given(st.lists(st.tuples(small | u32, small | u32, small | u64), unique=True, max_size=40))
def test_sorting_scns_gives_binlog_order(positions: list[tuple[int, int, int]]) -> None:
    # A stream is ordered by (change_id, binlog file, position in it); the source server id
    # plays no part, so give each SCN an arbitrary one.
    in_order = sorted(positions)
    rng = random.Random(len(positions))
    scns_ = [SCN(c, rng.randrange(1000), i, p) for c, i, p in in_order]
    shuffled = scns_[:]
    rng.shuffle(shuffled)
    assert [(s.change_id, s.log_index, s.log_pos) for s in sorted(shuffled)] == in_order


def test_next_binlog_file_sorts_after_a_larger_position_in_the_previous_file() -> None:
    assert SCN(0, 1, 4, 1_000_000) < SCN(0, 1, 5, 4) < SCN(0, 1, 5, 120)


def test_failover_bump_sorts_after_everything_from_the_old_server() -> None:
    old = SCN(3, 11, 900, 2**40)
    new = old.bump_change_id(server_id=22, log_index=1, log_pos=4)
    assert new == SCN(4, 22, 1, 4)
    assert new.server_id == 22
    assert old < new


def test_server_id_is_carried_but_not_compared() -> None:
    a, b = SCN(1, 10, 2, 3), SCN(1, 20, 2, 3)
    assert a == b and not a < b and not b < a
    assert hash(a) == hash(b)
    assert a.server_id == 10 and b.server_id == 20


def test_zero_sorts_before_every_real_scn() -> None:
    assert SCN.ZERO is ZERO_SCN and SCN.zero() is ZERO_SCN
    assert str(ZERO_SCN) == "0:0:0:0"
    assert ZERO_SCN < SCN(0, 0, 0, 1) < SCN(0, 0, 1, 0) < SCN(1, 0, 0, 0)


@FAST
@given(scns, scns)
def test_byte_order_equals_value_order(a: SCN, b: SCN) -> None:
    if a != b:
        assert (a < b) == (a.to_bytes() < b.to_bytes())
    elif a.server_id == b.server_id:
        assert a.to_bytes() == b.to_bytes()


@FAST
@given(scns)
def test_bytes_round_trip_is_exact(scn: SCN) -> None:
    data = scn.to_bytes()
    assert len(data) == SCN_BYTES
    back = SCN.from_bytes(data)
    assert (back.change_id, back.server_id, back.log_index, back.log_pos) == (
        scn.change_id,
        scn.server_id,
        scn.log_index,
        scn.log_pos,
    )
    assert SCN.from_bytes(bytearray(data)) == scn == SCN.from_bytes(memoryview(data))


def test_bytes_layout_is_big_endian_compared_fields_first() -> None:
    data = SCN(1, 0xAABBCCDD, 2, 3).to_bytes()
    assert data == bytes.fromhex("00000001000000020000000000000003aabbccdd")


@pytest.mark.parametrize("size", [0, 1, 19, 21, 40])
def test_from_bytes_rejects_wrong_length(size: int) -> None:
    with pytest.raises(MalformedScnError, match=f"exactly 20 long, got {size}"):
        SCN.from_bytes(b"\x00" * size)


def test_from_bytes_rejects_non_bytes() -> None:
    with pytest.raises(MalformedScnError, match="must be bytes, got str"):
        SCN.from_bytes("0" * 20)  # type: ignore[arg-type]


@FAST
@given(scns)
def test_text_round_trip_is_exact(scn: SCN) -> None:
    text = str(scn)
    back = SCN.parse(text)
    assert back == scn and back.server_id == scn.server_id
    assert str(back) == text


def test_text_form_is_change_server_index_pos() -> None:
    assert str(SCN(7, 101, 42, 12345)) == "7:101:42:12345"
    assert SCN.parse("7:101:42:12345") == SCN(7, 101, 42, 12345)
    assert SCN.parse(f"{U32_MAX}:{U32_MAX}:{U32_MAX}:{U64_MAX}").log_pos == U64_MAX


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["empty SCN text", "change_id:server_id:log_index:log_pos"]),
        ("1:2:3", ["3 field(s)", "expected 4", "change_id:server_id:log_index:log_pos"]),
        ("1:2:3:4:5", ["5 field(s)", "expected 4"]),
        ("1234", ["1 field(s)"]),
        (" 1:2:3:4", ["surrounding whitespace"]),
        ("1:2:3:4\n", ["surrounding whitespace"]),
        ("1::3:4", ["server_id is empty"]),
        ("x:2:3:4", ["change_id is not an integer", "'x'"]),
        ("1:2:3:4.0", ["log_pos is not an integer", "'4.0'"]),
        ("1:2: 3:4", ["log_index is not an integer", "' 3'"]),
        ("+1:2:3:4", ["change_id is not an integer", "'+1'", "without sign"]),
        ("1:2_0:3:4", ["server_id is not an integer", "'2_0'", "underscores"]),
        ("1:2:0x10:4", ["log_index is not an integer", "'0x10'"]),
        ("1:٣:3:4", ["server_id is not an integer"]),  # int() would accept Arabic-Indic digits
        ("1:2:3:007", ["log_pos has a leading zero", "'007'"]),
        ("-1:2:3:4", ["change_id is negative", "'-1'", "0..4294967295"]),
        ("1:2:-3:4", ["log_index is negative", "0..4294967295"]),
        ("1:2:3:-4", ["log_pos is negative", "0..18446744073709551615"]),
        ("4294967296:2:3:4", ["change_id = 4294967296 is out of range 0..4294967295"]),
        ("1:2:3:18446744073709551616", ["log_pos = 18446744073709551616 is out of range"]),
        ("1:2:3:" + "9" * 5000, ["log_pos", "out of range", "(5000 chars)"]),
    ],
)
def test_malformed_text_names_the_problem(text: str, expected: list[str]) -> None:
    with pytest.raises(MalformedScnError) as info:
        SCN.parse(text)
    for fragment in expected:
        assert fragment in str(info.value)


def test_parse_rejects_non_str() -> None:
    with pytest.raises(MalformedScnError, match="must be str, got bytes"):
        SCN.parse(b"1:2:3:4")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ((-1, 0, 0, 0), "change_id = -1 is out of range 0..4294967295"),
        ((0, 2**32, 0, 0), "server_id = 4294967296 is out of range"),
        ((0, 0, 2**32, 0), "log_index = 4294967296 is out of range"),
        ((0, 0, 0, 2**64), "log_pos = 18446744073709551616 is out of range"),
        ((True, 0, 0, 0), "change_id must be an int in 0..4294967295, got bool True"),
        ((0, 0, 0, 1.0), "log_pos must be an int in 0..18446744073709551615, got float 1.0"),
        ((0, "1", 0, 0), "server_id must be an int"),
    ],
)
def test_constructor_rejects_out_of_range_or_non_int(
    fields: tuple[int, int, int, int], expected: str
) -> None:
    with pytest.raises(MalformedScnError) as info:
        SCN(*fields)
    assert expected in str(info.value)


def test_bump_past_the_last_change_id_is_an_error() -> None:
    with pytest.raises(MalformedScnError, match="change_id = 4294967296"):
        SCN(U32_MAX, 1, 1, 4).bump_change_id(2, 1, 4)


def test_scn_is_frozen() -> None:
    scn = SCN(1, 2, 3, 4)
    with pytest.raises(AttributeError):
        scn.log_pos = 5  # type: ignore[misc]
