"""The compiled hot path (drc.native) against the pure Python one, on a real binlog.

Records once (or reuses ``--binlog DIR``): a one-server sandbox, ``sysbench oltp_write_only``
prepare (4 tables of 10,000 rows, in multi-row inserts) and ``--txns`` transactions, then a
``bench.orders`` table of bench_codec's shape (bigint, varchar, decimal, datetime(6), int,
nullable varchar) written in 100-row transactions of inserts and updates; the binlog files
are copied to DIR. Then, per run, one child process with ``DRC_COMPILED=off`` and one with
``=on``, alternating, each timing the CPU time of (best of ``--repeat``, the garbage collector off):

- decode: every event packet of the files through EventDecoder (header, GTID, XID, rows:
  drc.replicator.binlog) -> source events
- assemble: TransactionAssembler (pure in both) -> Transactions
- encode: drc.core.codec.encode_transaction -> record bytes
- decode records: decode_transaction (a subscriber) and decode_rows (catch-up's bulk read)

and the sha256 of all the record bytes and of the decoded transactions' repr, which must be
the same for both. Prints the medians and the pure/compiled ratio.

    python bench/bench_compiled.py [--txns 5000] [--orders 20000] [--runs 5] [--repeat 3]
                                   [--binlog DIR]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = (
    "decode",
    "assemble",
    "encode",
    "decode_transaction",
    "decode_rows",
    "rows+pack",
    "rowpack",
)


def record(out: Path, txns: int, orders: int) -> None:
    import pymysql

    from drc.sandbox.sandbox import Sandbox

    with tempfile.TemporaryDirectory() as tmp:
        box = Sandbox(Path(tmp) / "sbx")
        server = box.up(1).server("dc1")
        try:
            conn = pymysql.connect(host=server.host, port=server.port, user=server.user,
                                   password=server.password, autocommit=True)  # fmt: skip
            cur = conn.cursor()
            cur.execute("CREATE DATABASE sbtest")
            sysbench = [
                "sysbench", "oltp_write_only", "--db-driver=mysql",
                f"--mysql-host={server.host}", f"--mysql-port={server.port}",
                f"--mysql-user={server.user}", f"--mysql-password={server.password}",
                "--mysql-db=sbtest", "--tables=4", "--table-size=10000", "--threads=2",
            ]  # fmt: skip
            subprocess.run([*sysbench, "prepare"], check=True, capture_output=True)
            subprocess.run([*sysbench, f"--events={txns}", "--time=0", "run"], check=True,
                           capture_output=True)  # fmt: skip
            _orders(cur, orders)
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW BINARY LOGS")
            names = [row[0] for row in cur.fetchall()]
            conn.close()
            out.mkdir(parents=True, exist_ok=True)
            for name in names:
                shutil.copy(Path(server.base_dir) / "data" / name, out / name)
            (out / "files.json").write_text(json.dumps(names))
        finally:
            box.down()


def _orders(cur: Any, rows: int) -> None:
    cur.execute(
        "CREATE TABLE sbtest.orders (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL,"
        " amount DECIMAL(12,2) NOT NULL, created DATETIME(6) NOT NULL, qty INT NOT NULL,"
        " note VARCHAR(40) NULL)"
    )
    for start in range(0, rows, 100):
        cur.execute("BEGIN")
        values = ", ".join(
            f"({n}, 'customer-{n * 7919 % 10**8:08d}', {_amount(n):.2f},"
            f" '2024-01-01' + INTERVAL {n * 7 % 10**7} SECOND + INTERVAL {n % 10**6} MICROSECOND,"
            f" {n % 1000}, {'NULL' if n % 2 else repr(f'note {n}')})"
            for n in range(start, start + 100)
        )
        cur.execute(f"INSERT INTO sbtest.orders VALUES {values}")
        cur.execute(
            f"UPDATE sbtest.orders SET qty = qty + 1 WHERE id <= {start + 49} AND id >= {start}"
        )
        cur.execute("COMMIT")


def _amount(n: int) -> float:
    return n * 104729 % (2 * 10**9) / 100 - 10**7


def packets(binlog: Path) -> list[bytes]:
    """Every event of the recorded files as the stream's packets carry it (0x00 + event)."""
    found = []
    for name in json.loads((binlog / "files.json").read_text()):
        data = (binlog / name).read_bytes()
        pos = 4  # the magic
        while pos < len(data):
            size = int.from_bytes(data[pos + 9 : pos + 13], "little")
            found.append(b"\0" + data[pos : pos + size])
            pos += size
    return found


class _Control:
    """The library's control connection, for what its parse of an event asks of it."""

    charset = "utf8mb4"

    def _get_dbms(self) -> str:
        return "mariadb"


def _pack(row: Any) -> bytes | None:
    from drc.core.value_codec import pack

    return None if row is None else pack(row)


def _rows_events(data: list[bytes], decoder: Any) -> list[tuple[Any, ...]]:
    """(layout, op, packet, body, end, packed column names) of every rows event of FULL
    images, as EventDecoder finds them (its tables as the TABLE_MAPs before each say)."""
    from drc.replicator.binlog import events
    from drc.replicator.binlog.rowpack import keys_of

    jobs = []
    keys: dict[int, tuple[bytes, ...]] = {}
    for packet in data:
        kind = packet[5]
        if kind not in events.ROWS:
            decoder.decode(packet)
            continue
        entry = decoder.tables.get(int.from_bytes(packet[20:26], "little"))
        if entry is None or kind in events.ROWS_V2:
            continue
        end = 20 + int.from_bytes(packet[10:14], "little") - 19 - 4
        layout = entry.layout
        names = keys.setdefault(id(layout), keys_of(layout))
        jobs.append(
            (layout, events.ROWS[kind], packet, 20 + decoder._post_header(kind, 8), end, names)
        )
    return jobs


def child(binlog: Path, repeat: int) -> dict[str, Any]:
    import drc.native
    from drc.core import codec
    from drc.core.tablefilter import TableFilter
    from drc.replicator.assembler import TransactionAssembler
    from drc.replicator.binlog.events import FOR_LIBRARY, EventDecoder, TableMaps
    from drc.replicator.binlog.library import LibraryParser
    from drc.replicator.binlog.rowpack import pack_rows
    from drc.replicator.binlog.rows import decode_rows

    data = packets(binlog)
    decoder = EventDecoder(TableMaps(), json.loads((binlog / "files.json").read_text())[0])
    decoder.checksum = True
    library = LibraryParser(_Control(), decoder)
    for packet in data:  # the library parses each TABLE_MAP once; later ones hit the cache
        if decoder.decode(packet) is FOR_LIBRARY:
            library.parse(packet)
    times: dict[str, float] = {}

    def timed(stage: str, work: Any) -> Any:
        best, result = float("inf"), None
        for _ in range(repeat):
            result = None
            gc.collect()
            gc.disable()  # the collector's passes over what earlier stages left are noise here
            began = time.process_time()  # CPU: the host is shared, wall time waits for it
            result = work()
            best = min(best, time.process_time() - began)
            gc.enable()
        times[stage] = best
        return result

    def decode() -> list[Any]:
        events = []
        for packet in data:
            event = decoder.decode(packet)
            if event is not None and event is not FOR_LIBRARY:
                events.append(event)
        return events

    def assemble() -> list[Any]:
        assembler = TransactionAssembler(1, 1, TableFilter())
        txns = []
        for event in events:
            committed = assembler.feed(event)
            if committed is not None and not committed.empty:
                txns.extend(committed.fragments())
        return txns

    events = timed("decode", decode)
    txns = timed("assemble", assemble)
    records = timed("encode", lambda: [codec.encode_transaction(t) for t in txns])
    decoded = timed("decode_transaction", lambda: [codec.decode_transaction(r)[0] for r in records])
    timed("decode_rows", lambda: [codec.decode_rows(r) for r in records])
    jobs = _rows_events(data, decoder)

    def rows_then_pack() -> list[Any]:
        return [
            [(_pack(before), _pack(after)) for before, after in decode_rows(*job[:5])]
            for job in jobs
        ]

    packed = timed("rows+pack", rows_then_pack)
    one_pass = timed("rowpack", lambda: [pack_rows(job[0], job[5], *job[1:5]) for job in jobs])
    return {
        "compiled": drc.native.STATE.compiled,
        "times": times,
        "packets": len(data),
        "transactions": len(txns),
        "rows": sum(len(t.changes) for t in txns),
        "records_sha256": hashlib.sha256(b"".join(records)).hexdigest(),
        "decoded_sha256": hashlib.sha256(repr(decoded).encode()).hexdigest(),
        "rowpack_same": packed == [list(images) for images in one_pass],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--txns", type=int, default=5000)
    parser.add_argument("--orders", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    default = Path(tempfile.gettempdir()) / "drc-bench-binlog"
    parser.add_argument("--binlog", type=Path, default=default)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.binlog, args.repeat)))
        return
    if not (args.binlog / "files.json").is_file():
        print(f"recording a binlog into {args.binlog} ...", flush=True)
        record(args.binlog, args.txns, args.orders)
    results: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for run in range(args.runs):
        for mode in ("off", "on"):
            argv = [sys.executable, __file__, "--child", "--binlog", str(args.binlog),
                    "--repeat", str(args.repeat)]  # fmt: skip
            env = {**os.environ, "DRC_COMPILED": mode}
            out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if result["compiled"] != (mode == "on"):
                sys.exit(f"DRC_COMPILED={mode} ran compiled={result['compiled']}: build first")
            results[mode].append(result)
            took = (f"{stage} {result['times'][stage] * 1e3:.0f} ms" for stage in STAGES)
            print(f"run {run + 1} {mode:>3}: {', '.join(took)}", flush=True)
    first = results["off"][0]
    same = all(
        r["records_sha256"] == first["records_sha256"]
        and r["decoded_sha256"] == first["decoded_sha256"]
        and r["rowpack_same"]
        for r in results["off"] + results["on"]
    )
    print(f"\n{first['packets']:,} events, {first['transactions']:,} transactions, "
          f"{first['rows']:,} row changes; record bytes and decoded transactions identical in "
          f"pure and compiled: {same}\n")  # fmt: skip
    print("| stage | pure ms | compiled ms | pure us/row | compiled us/row | pure/compiled |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    rows = first["rows"]
    for stage in STAGES:
        pure = statistics.median(r["times"][stage] for r in results["off"])
        fast = statistics.median(r["times"][stage] for r in results["on"])
        print(f"| {stage} | {pure * 1e3:,.0f} | {fast * 1e3:,.0f} | {pure / rows * 1e6:.2f} | "
              f"{fast / rows * 1e6:.2f} | {pure / fast:.2f}x |")  # fmt: skip
    if not same:
        sys.exit("pure and compiled gave different bytes")


if __name__ == "__main__":
    main()
