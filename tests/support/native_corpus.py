"""What the compiled and the pure hot path must agree on, byte for byte (tests/unit/test_native):
``python -m tests.support.native_corpus`` (with PYTHONHASHSEED fixed: SET values are
frozensets) prints, as JSON, whether this process runs the
compiled modules (DRC_COMPILED) and a digest of every output of the decoding cases.

The outputs: the rows events of a row of every type (tests/support/binlog_cases, NULLs
between) as insert, update and delete decoded to row images, those images as the records
drc.core.codec writes, the records decoded back (decode_transaction and decode_rows), and the
images packed by the one-pass prototype. Exceptions count as outputs too (their type and
message), so both paths must also fail alike on corrupt bodies."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from drc.core import codec
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.replicator.binlog.columns import full_bitmap, layout_of
from drc.replicator.binlog.rowpack import keys_of, pack_rows
from drc.replicator.binlog.rows import decode_rows
from tests.support.binlog_cases import CASES
from tests.support.native_digest import attempt, report


def outputs() -> list[Any]:
    columns = [
        SimpleNamespace(**{**vars(case[1]), "name": f"c{i}"}) for i, case in enumerate(CASES)
    ]
    layout = layout_of("shop", "orders", columns)
    width = (len(CASES) + 7) // 8
    images = []
    for nulls in (0, sum(1 << i for i in range(0, len(CASES), 3)), (1 << len(CASES)) - 1):
        values = b"".join(case[2] for i, case in enumerate(CASES) if not nulls >> i & 1)
        images.append(nulls.to_bytes(width, "little") + values)
    found: list[Any] = []
    changes = []
    for op in Op:
        bitmaps = full_bitmap(len(CASES)) * (2 if op is Op.UPDATE else 1)
        body = bytes([len(CASES)]) + bitmaps + b"".join(images * (2 if op is Op.UPDATE else 1))
        for data in (body, body[:-1], body + b"\x00"):  # and two corrupt ones
            found.append(attempt(lambda d=data, o=op: decode_rows(layout, o, d, 0, len(d))))
            found.append(
                attempt(lambda d=data, o=op: pack_rows(layout, keys_of(layout), o, d, 0, len(d)))
            )
        for before, after in decode_rows(layout, op, body, 0, len(body)):
            changes.append(RowChange("shop", "orders", op, before, after))
    txn = Transaction(SCN(1, 2, 3, 4), 2, "0-2-9", 1_700_000_000, tuple(changes))
    record = codec.encode_transaction(txn)
    found += [record, codec.decode_transaction(record), codec.decode_rows(record)]
    return found


if __name__ == "__main__":
    report(outputs)
