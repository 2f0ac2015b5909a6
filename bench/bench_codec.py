"""Encode/decode throughput of the DRC record codec against pickle and json, in one run.

Workloads: ``--small`` transactions of 1 row and ``--large`` transactions of 100 rows, each row
an insert or an update (before + after) of a table with bigint, varchar, decimal, datetime, int
and nullable varchar columns.

Baselines, same Transaction objects, same run:
- pickle protocol 5 of the Transaction: exact round-trip, but no framing, CRC or structure check,
  and unpickling untrusted bytes can run code.
- json with ``default=str`` of a plain-dict form (conversion included in encode): lossy (decimals,
  datetimes come back as strings; decode stops at ``json.loads``, no Transaction is rebuilt).
- msgspec.msgpack, untyped, of the codec's wire structure, if msgspec is importable: lossy for
  the same reason (no ext hook for types it encodes natively), shown for the raw speed.

    .venv/bin/python bench/bench_codec.py [--small 10000] [--large 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import pickle
import random
import time
from collections.abc import Callable
from typing import Any

from drc.core import codec
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN


def make_row(rng: random.Random, pk: int) -> dict[str, Any]:
    return {
        "id": pk,
        "name": f"customer-{rng.randrange(10**8):08d}",
        "amount": decimal.Decimal(rng.randrange(-(10**9), 10**9)).scaleb(-2),
        "created": dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randrange(10**13)),
        "qty": rng.randrange(1000),
        "note": None if rng.random() < 0.5 else f"note {rng.randrange(10**6)}",
    }


def make_txn(rng: random.Random, n: int, rows: int) -> Transaction:
    changes = []
    for i in range(rows):
        after = make_row(rng, n * 1000 + i)
        if rng.random() < 0.5:
            changes.append(RowChange("shop", "orders", Op.INSERT, None, after))
        else:
            before = dict(after, qty=after["qty"] + 1)
            changes.append(RowChange("shop", "orders", Op.UPDATE, before, after))
    scn = SCN(1, 101, 7, 4 + n * 512)
    return Transaction(scn, 101, f"0-101-{n}", 1_700_000_000 + n, tuple(changes))


def to_plain(txn: Transaction) -> dict[str, Any]:
    return {
        "scn": str(txn.scn),
        "server_id": txn.server_id,
        "gtid": txn.gtid,
        "timestamp": txn.timestamp,
        "changes": [[c.schema, c.table, c.op.value, c.before, c.after] for c in txn.changes],
    }


def time_it(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


Codec = tuple[Callable[[Transaction], bytes], Callable[[bytes], Any]]


def codecs() -> dict[str, Codec]:
    found: dict[str, Codec] = {
        "drc (msgpack+ext, CRC)": (codec.encode_transaction, lambda b: codec.decode_transaction(b)),
        "pickle p5": (lambda t: pickle.dumps(t, protocol=5), pickle.loads),
        "json default=str (lossy)": (
            lambda t: json.dumps(to_plain(t), default=str).encode(),
            json.loads,
        ),
    }
    try:
        import msgspec
    except ImportError:
        return found
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()
    wire = codec._txn_to_wire  # same structure as the drc payload
    found["msgspec untyped (lossy)"] = (lambda t: enc.encode(wire(t)), dec.decode)
    return found


def bench(txns: list[Transaction], repeat: int) -> list[list[str]]:
    rows = sum(len(t.changes) for t in txns)
    out = []
    for name, (encode, decode) in codecs().items():
        blobs = [encode(t) for t in txns]
        size = sum(map(len, blobs))
        t_enc = time_it(lambda: [encode(t) for t in txns], repeat)  # noqa: B023
        t_dec = time_it(lambda: [decode(b) for b in blobs], repeat)  # noqa: B023
        out.append(
            [
                name,
                f"{size / len(txns):,.0f}",
                f"{len(txns) / t_enc:,.0f}",
                f"{rows / t_enc:,.0f}",
                f"{size / t_enc / 1e6:,.1f}",
                f"{len(txns) / t_dec:,.0f}",
                f"{rows / t_dec:,.0f}",
                f"{size / t_dec / 1e6:,.1f}",
            ]
        )
    return out


HEADERS = ["codec", "B/txn", "enc txn/s", "enc rows/s", "enc MB/s"]
HEADERS += ["dec txn/s", "dec rows/s", "dec MB/s"]


def print_table(title: str, rows: list[list[str]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(HEADERS) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(HEADERS) - 1)) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000, help="1-row transactions")
    parser.add_argument("--large", type=int, default=1_000, help="100-row transactions")
    parser.add_argument("--repeat", type=int, default=3, help="best of N timings")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a tenth of the transactions")
    args = parser.parse_args()
    if args.quick:
        args.small, args.large, args.repeat = args.small // 10, args.large // 10, 1
    rng = random.Random(args.seed)
    for count, rows in ((args.small, 1), (args.large, 100)):
        txns = [make_txn(rng, n, rows) for n in range(count)]
        for txn in txns:  # the bench is only meaningful if the codec is exact on this data
            assert codec.decode_transaction(codec.encode_transaction(txn))[0] == txn
        print_table(f"{count:,} transactions x {rows} row(s)", bench(txns, args.repeat))


if __name__ == "__main__":
    main()
