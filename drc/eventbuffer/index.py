"""The in-memory sparse SCN index of one segment.

::

    segment file   | hdr | r0 | r1 | r2 | r3 | r4 | r5 | r6 | r7 | r8 | ...
    index entries         ^ (k0, 64)      ^ (k3, 4160)        ^ (k7, 8300)
                          one entry per >= ``every_bytes`` of records

A seek for "the first record with SCN > after" takes the last entry whose key is <= after
(binary search), then reads forward at most ``every_bytes`` plus one record. Keys are the first
16 bytes of the SCN encoding, which compare in SCN order as raw bytes.

Why sparse Python lists and not a full numpy index: a 64 MiB segment of 300-byte records holds
~200k records; a full index costs ~60 bytes a record in Python objects (~20 in numpy), a sparse
one with 4 KiB spacing ~0.1% of that, and the forward scan it adds (~14 records) costs less
than decoding the batch it leads to. Both lists only grow, by the single writer thread; a
reader takes ``len(offsets)`` first and searches no further than that, and the writer appends
the key before the offset, so a reader never sees an offset without its key.
"""

from __future__ import annotations

from bisect import bisect_right


class SparseIndex:
    """(key, offset) of every record that starts ``every_bytes`` or more after the last entry."""

    __slots__ = ("every_bytes", "keys", "offsets")

    def __init__(self, every_bytes: int) -> None:
        if every_bytes < 1:
            raise ValueError(f"index spacing must be at least 1 byte, got {every_bytes}")
        self.every_bytes = every_bytes
        self.keys: list[bytes] = []
        self.offsets: list[int] = []

    def note(self, key: bytes, offset: int) -> None:
        """Called for every record appended or scanned, in file order."""
        offsets = self.offsets
        if not offsets or offset - offsets[-1] >= self.every_bytes:
            self.keys.append(key)
            offsets.append(offset)

    def floor(self, key: bytes, default: int) -> int:
        """Offset of the last entry with key <= ``key``, or ``default`` if there is none.

        Every record before that entry has a key <= ``key`` too, so a forward scan from there
        finds the first record with a greater key.
        """
        n = len(self.offsets)
        i = bisect_right(self.keys, key, 0, n)
        return self.offsets[i - 1] if i else default

    def truncate(self, offset: int) -> None:
        """Forget the entries at or after ``offset`` (recovery cut the file there)."""
        n = bisect_right(self.offsets, offset - 1)
        del self.keys[n:]
        del self.offsets[n:]

    def __len__(self) -> int:
        return len(self.offsets)
