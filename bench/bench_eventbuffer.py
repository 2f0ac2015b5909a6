"""EventBuffer append+commit and read throughput against plain files, in one run.

Workload: ``--records`` records (default 200k) of ~300-byte payloads shaped like encoded row
changes (field names, short strings, numbers: LZ4 shrinks them about 2x), committed every
``--commit-every`` records (default 100) with ``fsync="batch"``: one fdatasync per commit.

Baselines, same bytes, same run, same directory:
- raw write: the payloads appended to one file with os.write, one write + fdatasync per commit
  batch (what the buffer costs beyond the disk: framing, CRC, index, segment rotation).
- raw read: that file read sequentially in 1 MiB chunks (the disk/page-cache ceiling).
- raw framed read: the same payloads with a 4-byte length prefix, split back into records by a
  Python loop, no checks (the floor for any per-record Python reader).

Reads go through ``read_after`` batches (1000 records / 4 MiB), every record CRC-checked and,
with LZ4, decompressed. Files are in the page cache when read (just written).

    .venv/bin/python bench/bench_eventbuffer.py [--records 200000] [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import struct
import tempfile
import time
from pathlib import Path

from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer

_sync = getattr(os, "fdatasync", os.fsync)
_LEN = struct.Struct("<I")


def make_payloads(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    out = []
    for i in range(n):
        fields = [
            f"id={i}",
            f"customer=customer-{rng.randrange(10**8):08d}",
            f"amount={rng.randrange(10**9) / 100:.2f}",
            f"status={rng.choice(words)}",
            f"note={' '.join(rng.choice(words) for _ in range(rng.randrange(4, 14)))}",
            f"created=2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
        ]
        out.append(("shop.orders|update|" + "|".join(fields) * 2).encode()[:300].ljust(300, b"."))
    return out


def bench_raw_write(path: Path, payloads: list[bytes], every: int, framed: bool) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(0, len(payloads), every):
            chunk = payloads[i : i + every]
            if framed:
                chunk = [part for p in chunk for part in (_LEN.pack(len(p)), p)]
            os.write(fd, b"".join(chunk))
            _sync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def bench_raw_read(path: Path) -> float:
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - start


def bench_raw_framed_read(path: Path, expected: int) -> float:
    start = time.perf_counter()
    data = path.read_bytes()
    offset, count, unpack = 0, 0, _LEN.unpack_from
    records = []
    while offset < len(data):
        (n,) = unpack(data, offset)
        records.append(data[offset + 4 : offset + 4 + n])
        offset += 4 + n
        count += 1
    assert count == expected
    return time.perf_counter() - start


def bench_buffer(directory: Path, payloads: list[bytes], every: int, compress: bool):
    scns = [SCN(1, 101, 7, 1000 + 500 * i) for i in range(len(payloads))]
    start = time.perf_counter()
    with EventBuffer.open(directory, compress=compress, fsync="batch") as buf:
        for i in range(0, len(payloads), every):
            buf.append_many(
                (scns[j], payloads[j], 1_700_000_000_000 + j) for j in range(i, i + every)
            )
            buf.commit()
        write_s = time.perf_counter() - start
        size = buf.size_bytes
        start = time.perf_counter()
        after, count, nbytes = SCN.ZERO, 0, 0
        while batch := buf.read_after(after, 1000, 4 << 20):
            count += len(batch)
            nbytes += sum(len(r.payload) for r in batch)
            after = batch[-1].scn
        read_s = time.perf_counter() - start
    assert count == len(payloads) and nbytes == sum(map(len, payloads))
    return write_s, read_s, size


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def row(name: str, n: int, nbytes: int, seconds: float, disk: int | str) -> str:
    rate = n / seconds
    mbs = nbytes / seconds / 1e6
    size = f"{disk:,}" if isinstance(disk, int) else disk
    return f"| {name} | {rate:,.0f} | {mbs:,.1f} | {seconds:.2f} | {size} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--commit-every", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="20k records")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    n = 20_000 if args.quick else args.records
    every = args.commit_every
    payloads = make_payloads(n, args.seed)
    total = sum(map(len, payloads))
    rss_workload_mb = _peak_rss_mb()
    base = Path(tempfile.mkdtemp(prefix="bench_eventbuffer_", dir=args.dir))
    try:
        lines = [
            f"{n:,} records of {total // n} bytes, commit (fdatasync) every {every}; "
            f"files in {base}",
            "",
            "| case | records/s | payload MB/s | seconds | bytes on disk |",
            "|---|---:|---:|---:|---:|",
        ]
        raw = base / "raw.bin"
        secs = bench_raw_write(raw, payloads, every, framed=False)
        lines.append(row("raw write + fdatasync per batch (baseline)", n, total, secs, total))
        framed = base / "framed.bin"
        secs = bench_raw_write(framed, payloads, every, framed=True)
        results = {}
        for compress in (False, True):
            results[compress] = bench_buffer(base / f"buf-{compress}", payloads, every, compress)
            write_s, _, size = results[compress]
            name = f"EventBuffer append+commit{', LZ4' if compress else ''}"
            lines.append(row(name, n, total, write_s, size))
        secs = bench_raw_read(raw)
        lines.append(row("raw sequential read, 1 MiB chunks (baseline)", n, total, secs, total))
        secs = bench_raw_framed_read(framed, n)
        lines.append(row("raw length-prefixed split, Python loop (baseline)", n, total, secs, "-"))
        for compress in (False, True):
            _, read_s, size = results[compress]
            name = f"EventBuffer read_after batches{', LZ4' if compress else ''}"
            lines.append(row(name, n, total, read_s, size))
        lines += [
            "",
            f"peak RSS: {rss_workload_mb:.0f} MiB once the workload is built, "
            f"{_peak_rss_mb():.0f} MiB for the whole run (mapped segment pages read count too)",
        ]
        print("\n".join(lines))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
