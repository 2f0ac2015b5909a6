"""Child process of bench_replicator.py: capture a binlog range with DRC, report JSON on stdout."""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drc.core.codec import decode_transaction  # noqa: E402
from drc.core.scn import SCN  # noqa: E402
from drc.eventbuffer import EventBuffer  # noqa: E402
from drc.metastore.store import MetaStore  # noqa: E402
from drc.replicator.replicator import CaptureOptions, Replicator  # noqa: E402
from drc.replicator.source import SourceSettings, split_binlog_name  # noqa: E402


def main() -> None:
    spec = json.loads(sys.argv[1])
    server, start, end = spec["server"], spec["start"], spec["end"]
    directory = Path(spec["dir"])
    directory.mkdir(parents=True)
    buffer = EventBuffer.open(directory)
    metastore = MetaStore.open(directory / "metastore.sqlite3")
    settings = SourceSettings(
        server["host"], server["port"], server["user"], server["password"], 99002
    )
    replicator = Replicator(
        settings, buffer, metastore, CaptureOptions(start_from=f"{start[0]}:{start[1]}")
    )
    target = (split_binlog_name(end[0])[1], end[1])
    stop = threading.Event()
    thread = threading.Thread(target=replicator.run, args=(stop,))
    began = time.perf_counter()
    thread.start()
    while True:
        last = buffer.last_scn
        if last is not None and (last.log_index, last.log_pos) >= target:
            break
        time.sleep(0.002)
    capture_s = time.perf_counter() - began
    stop.set()
    thread.join()
    records = size = 0
    after = SCN(0, 0, 0, 0)
    payloads = []
    began = time.perf_counter()
    while batch := buffer.read_after(after, max_records=5000, max_bytes=32 << 20):
        records += len(batch)
        size += sum(len(r.payload) for r in batch)
        payloads.extend(r.payload for r in batch[:: max(1, len(batch) // 50)])
        after = batch[-1].scn
    read_s = time.perf_counter() - began
    began = time.perf_counter()
    for payload in payloads:
        decode_transaction(payload)
    decode_s = (time.perf_counter() - began) * records / max(1, len(payloads))
    buffer.close()
    metastore.close()
    print(json.dumps({
        "capture_s": capture_s, "records": records, "bytes": size, "read_s": read_s,
        "decode_s": decode_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
