"""Run the replicator against a sandbox server inside the test process, and read what it stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from drc.eventbuffer import EventBuffer
from drc.metastore.store import MetaStore

from drc.core.codec import decode_transaction
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.replicator.replicator import CaptureOptions, Replicator
from drc.replicator.source import SourceSettings, split_binlog_name
from drc.sandbox.sandbox import ServerInfo
from tests.integration.servers import connect

ZERO = SCN(0, 0, 0, 0)


def source_settings(server: ServerInfo, replica_server_id: int = 77001) -> SourceSettings:
    return SourceSettings(
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        replica_server_id=replica_server_id,
    )


def master_position(server: ServerInfo) -> tuple[str, int]:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            log_file, log_pos = cur.fetchone()[:2]
    finally:
        conn.close()
    return log_file, int(log_pos)


@dataclass
class Capture:
    replicator: Replicator
    buffer: EventBuffer
    metastore: MetaStore
    errors: list[BaseException]

    def wait_for(self, position: tuple[str, int], timeout: float = 60.0) -> None:
        """Until the buffer holds everything up to the source position ``position``."""
        target = (split_binlog_name(position[0])[1], position[1])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.errors:
                raise self.errors[0]
            last = self.buffer.last_scn
            if last is not None and (last.log_index, last.log_pos) >= target:
                return
            time.sleep(0.02)
        raise AssertionError(
            f"buffer at {self.buffer.last_scn}, source at {position} after {timeout}s"
        )


@contextmanager
def capturing(
    server: ServerInfo, buffer_dir: Path, options: CaptureOptions, **buffer_kwargs: object
) -> Iterator[Capture]:
    buffer = EventBuffer.open(buffer_dir, **buffer_kwargs)
    metastore = MetaStore.open(buffer_dir / "metastore.sqlite3")
    replicator = Replicator(source_settings(server), buffer, metastore, options)
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            replicator.run(stop)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield Capture(replicator, buffer, metastore, errors)
    finally:
        stop.set()
        thread.join(timeout=30)
        buffer.close()
        metastore.close()
    if errors:
        raise errors[0]


def read_all(buffer: EventBuffer, after: SCN = ZERO) -> list[Transaction]:
    """Every stored transaction fragment, in buffer order."""
    out: list[Transaction] = []
    while True:
        records = buffer.read_after(after, max_records=1000, max_bytes=64 << 20)
        if not records:
            return out
        for record in records:
            out.append(decode_transaction(record.payload)[0])
        after = records[-1].scn
