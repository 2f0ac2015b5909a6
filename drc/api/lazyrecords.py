"""A large page's transactions decoded one at a time, as they are read, never all at once.

A batch of the stream holds a large transaction whole (its fragments are never split across
batches: drc.eventbuffer.reader). Decoded at once, a million-row transaction took a subscriber
hundreds of megabytes of Python objects, on top of its ~40 MB of records. Records over
:data:`LAZY_BYTES` are therefore kept as bytes and each transaction (fragment) is decoded when
it is read, so a consumer that takes fragments one by one and lets them go (an apply channel
writing a large transaction piece by piece, drc.apply.streamed) holds the records and one
piece. What the page checks need (SCN, fragment number, last fragment) is read from each
record's first items, without its row images (:func:`peek_head`).

A lazy sequence is read again by decoding again: iterate it once where that matters.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from abc import abstractmethod
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

import msgpack

from drc.core.codec import HEADER_SIZE, decode_transaction, peek_length
from drc.core.errors import CorruptRecordError
from drc.core.events import Transaction
from drc.core.scn import SCN

# Records of one frame above this are decoded lazily; below it at once (no cost per read).
LAZY_BYTES = 4 << 20
_CRC = struct.Struct(">I")  # drc.core.codec's record header: the CRC at bytes 8..11


class Head(NamedTuple):
    """What orders a record in the stream."""

    scn: SCN
    fragment: int
    last_fragment: bool


def peek_head(records: bytes, offset: int) -> tuple[Head, int]:
    """The head of the record at ``offset`` and the offset after it, from its first payload
    items, once its frame and CRC are checked (what the rest holds is checked when the record
    is decoded): damage on the way is found when the page is read, as when it is decoded."""
    end = offset + peek_length(records, offset)
    if end > len(records):
        raise CorruptRecordError(f"truncated record at offset {offset}", offset)
    view = memoryview(records)
    (stored,) = _CRC.unpack_from(records, offset + 8)
    if (
        zlib.crc32(view[offset + HEADER_SIZE : end], zlib.crc32(view[offset : offset + 8]))
        != stored
    ):
        raise CorruptRecordError(f"CRC mismatch in record at offset {offset}", offset)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(memoryview(records)[offset + HEADER_SIZE : min(end, offset + HEADER_SIZE + 1024)])
    try:
        if unpacker.read_array_header() < 9:
            raise ValueError("too few items")
        scn, _server, _gtid, _ts, _drc, fragment, last = (unpacker.unpack() for _ in range(7))
        head = Head(SCN.from_bytes(scn), int(fragment), bool(last))
    except (ValueError, TypeError, msgpack.OutOfData, msgpack.ExtraData) as exc:
        message = f"record at offset {offset} has no readable head: {exc}"
        raise CorruptRecordError(message, offset) from exc
    return head, end


class _ReadByIndex(Sequence[Transaction]):
    """A sequence whose transactions are read one index at a time (:meth:`_at`, given any
    index a sequence takes, negative ones too); a slice is a list of such reads."""

    __slots__ = ()

    @overload
    def __getitem__(self, index: int) -> Transaction: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Transaction]: ...

    def __getitem__(self, index: int | slice) -> Transaction | Sequence[Transaction]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(len(self))[index]]
        return self._at(index)

    @abstractmethod
    def _at(self, index: int) -> Transaction: ...


class LazyTransactions(_ReadByIndex):
    """The transactions of ``records`` (whole codec records), each decoded when read."""

    __slots__ = ("_records", "_starts", "heads")

    def __init__(self, records: bytes, starts: Sequence[int], heads: Sequence[Head]) -> None:
        self._records = records
        self._starts = tuple(starts)
        self.heads = tuple(heads)

    @classmethod
    def of(cls, records: bytes) -> tuple[LazyTransactions, tuple[int, ...]]:
        """The records' sequence and where each record ends."""
        starts: list[int] = []
        heads: list[Head] = []
        offset = 0
        while offset < len(records):
            starts.append(offset)
            head, offset = peek_head(records, offset)
            heads.append(head)
        ends = (*starts[1:], len(records)) if starts else ()
        return cls(records, starts, heads), ends

    def __len__(self) -> int:
        return len(self._starts)

    def _at(self, index: int) -> Transaction:
        return decode_transaction(self._records, self._starts[index])[0]

    def __iter__(self) -> Iterator[Transaction]:
        for start in self._starts:
            yield decode_transaction(self._records, start)[0]


class Joined(_ReadByIndex):
    """Several frames' transactions as one sequence, none decoded by joining them."""

    __slots__ = ("_parts", "_offsets", "heads")

    def __init__(self, parts: Sequence[Sequence[Transaction]]) -> None:
        self._parts = tuple(parts)
        self._offsets = tuple(itertools.accumulate(len(p) for p in self._parts))
        self.heads = tuple(h for p in self._parts for h in heads(p))

    def __len__(self) -> int:
        return self._offsets[-1] if self._offsets else 0

    def _at(self, index: int) -> Transaction:
        if index < 0:
            index += len(self)
        part = bisect_right(self._offsets, index)
        if index < 0 or part >= len(self._parts):
            raise IndexError(index)
        return self._parts[part][index - (self._offsets[part - 1] if part else 0)]

    def __iter__(self) -> Iterator[Transaction]:
        for part in self._parts:
            yield from part


def heads(transactions: Sequence[Transaction]) -> Sequence[Head]:
    """Each transaction's head, without decoding a lazy sequence."""
    found = getattr(transactions, "heads", None)
    if found is not None:
        return found  # type: ignore[no-any-return]
    return [Head(t.scn, t.fragment, t.last_fragment) for t in transactions]


def join(parts: Sequence[Sequence[Transaction]]) -> Sequence[Transaction]:
    """The parts' transactions in order: a tuple unless a part is lazy."""
    if any(hasattr(p, "heads") for p in parts):
        return Joined(parts)
    return tuple(t for p in parts for t in p)
