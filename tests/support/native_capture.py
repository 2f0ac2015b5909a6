"""Capture a binlog range the way the replicator does (BinlogStream, TransactionAssembler,
drc.core.codec) and print a digest of the records: run once with ``DRC_COMPILED=on`` and once
with ``off``, the two must match (tests/integration/test_native_equivalence).

    DRC_NATIVE_CAPTURE='{"host", "port", "user", "password", "file", "pos", "server_id"}' \\
        python -m tests.support.native_capture

prints JSON: whether this process ran the compiled modules, the number of transactions and
row changes, and the sha256 of every record's bytes and of the transactions they decode to
(exceptions, e.g. a column type DRC does not decode, are outputs too)."""

from __future__ import annotations

import hashlib
import json
import os
import threading

from drc import native
from drc.core import codec
from drc.core.tablefilter import TableFilter
from drc.replicator.assembler import TransactionAssembler
from drc.replicator.source import BinlogStream, SourceSettings


def main() -> None:
    spec = json.loads(os.environ["DRC_NATIVE_CAPTURE"])
    settings = SourceSettings(spec["host"], spec["port"], spec["user"], spec["password"])
    stream = BinlogStream(
        settings, spec["file"], spec["pos"], blocking=False, server_id=spec["server_id"]
    )
    assembler = TransactionAssembler(spec["server_id"], 1, TableFilter())
    records, decoded, rows, transactions = hashlib.sha256(), hashlib.sha256(), 0, 0
    error = None
    try:
        for event in stream.events(threading.Event()):
            committed = assembler.feed(event)
            if committed is None or committed.empty:
                continue
            for txn in committed.fragments():
                record = codec.encode_transaction(txn)
                records.update(record)
                decoded.update(repr(codec.decode_transaction(record)[0]).encode())
                decoded.update(repr(codec.decode_rows(record)).encode())
                transactions += 1
                rows += len(txn.changes)
    except Exception as exc:  # noqa: BLE001 - how it fails is compared too
        error = f"{type(exc).__name__}: {exc}"
    finally:
        stream.close()
    print(
        json.dumps(
            {
                "compiled": native.STATE.compiled,
                "transactions": transactions,
                "rows": rows,
                "records": records.hexdigest(),
                "decoded": decoded.hexdigest(),
                "error": error,
            }
        )
    )


if __name__ == "__main__":
    main()
