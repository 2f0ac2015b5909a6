"""Run the replicator against a sandbox server inside the test process, and read what it stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from drc.core.codec import decode_transaction
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer
from drc.metastore.store import MetaStore
from drc.replicator.replicator import CaptureOptions, Replicator
from drc.replicator.source import SourceSettings, split_binlog_name
from drc.runtime import ReplicatorService
from drc.sandbox.sandbox import ServerInfo

ZERO = SCN(0, 0, 0, 0)


def source_settings(server: ServerInfo, replica_server_id: int = 77001) -> SourceSettings:
    return SourceSettings(
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        replica_server_id=replica_server_id,
    )


def source_section(server: ServerInfo, replica_server_id: int) -> dict[str, Any]:
    """The ``[source]`` config section for ``server``."""
    return {
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "password": server.password,
        "replica_server_id": replica_server_id,
    }


@contextmanager
def serving(service: ReplicatorService) -> Iterator[ReplicatorService]:
    """``service`` captures in a thread while the block runs (its API already started); then it
    is closed, and what stopped its capture fails the test."""
    stop = threading.Event()
    thread = threading.Thread(target=service.run_capture, args=(stop,), daemon=True)
    thread.start()
    try:
        yield service
    finally:
        stop.set()
        thread.join(timeout=30)
        service.close()
    assert service.failure is None, service.failure


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
    server: ServerInfo,
    buffer_dir: Path,
    options: CaptureOptions,
    also: tuple[ServerInfo, ...] = (),
    **buffer_kwargs: object,
) -> Iterator[Capture]:
    """Capture from ``server`` (and the other servers of its replication group ``also``)."""
    sources = [source_settings(s) for s in (server, *also)]
    with capturing_from(sources, buffer_dir, options, **buffer_kwargs) as capture:
        yield capture


@contextmanager
def capturing_from(
    sources: list[SourceSettings],
    buffer_dir: Path,
    options: CaptureOptions,
    **buffer_kwargs: object,
) -> Iterator[Capture]:
    """A replicator of ``sources`` capturing into ``buffer_dir`` in a thread while the block runs;
    the first error that stopped it is raised at the end."""
    buffer = EventBuffer.open(buffer_dir, **buffer_kwargs)
    metastore = MetaStore.open(buffer_dir / "metastore.sqlite3")
    replicator = Replicator(sources, buffer, metastore, options)
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


def captured(
    server: ServerInfo,
    buffer_dir: Path,
    include: list[str],
    start: tuple[str, int],
    end: tuple[str, int],
    exclude: tuple[str, ...] = (),
) -> list[Transaction]:
    """Every transaction stored by a capture of ``server``'s ``include`` tables (but
    ``exclude``) from the source position ``start`` until the buffer holds ``end``."""
    options = CaptureOptions(
        capture=TableFilter.build(include, exclude), start_from=f"{start[0]}:{start[1]}"
    )
    with capturing(server, buffer_dir, options) as capture:
        capture.wait_for(end)
        return read_all(capture.buffer)


SourceTxn = tuple[str, list[tuple[str, str, Any, Any]]]


def source_transactions(
    server: ServerInfo, start: tuple[str, int], schemas: list[str]
) -> list[SourceTxn]:
    """The source binlog from ``start``, read independently of DRC by python-mysql-replication:
    (GTID, [(schema, table, before, after), ...]) per transaction that touched ``schemas``."""
    reader = BinLogStreamReader(
        connection_settings={
            "host": server.host,
            "port": server.port,
            "user": server.user,
            "password": server.password,
        },
        server_id=88012,
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        is_mariadb=False,  # True ignores log_file/log_pos without a GTID (library bug)
        only_schemas=schemas,
        only_events=[MariadbGtidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent],
    )
    out: list[SourceTxn] = []
    gtid, changes = "", []
    for event in reader:
        if isinstance(event, MariadbGtidEvent):
            gtid, changes = event.gtid, []
        elif isinstance(event, XidEvent):
            if changes:
                out.append((gtid, changes))
        else:
            for row in event.rows:
                before = row.get("before_values") or (
                    row["values"] if isinstance(event, DeleteRowsEvent) else None
                )
                after = row.get("after_values") or (
                    row["values"] if isinstance(event, WriteRowsEvent) else None
                )
                changes.append((event.schema, event.table, before, after))
    reader.close()
    return out


def source_table_rows(
    server: ServerInfo, start: tuple[str, int], schema: str
) -> list[tuple[str, list[tuple[str, Any, Any]]]]:
    """Like source_transactions for one schema, each change as (table, before, after)."""
    return [
        (gtid, [(table, before, after) for _db, table, before, after in changes])
        for gtid, changes in source_transactions(server, start, [schema])
    ]


def checkpoint_scns(
    server: ServerInfo, start: tuple[str, int], channel: str = "crash"
) -> list[SCN]:
    """The SCNs ``channel`` wrote into drc.checkpoint, in the target's binlog order."""
    reader = BinLogStreamReader(
        connection_settings={"host": server.host, "port": server.port, "user": server.user,
                             "password": server.password},
        server_id=88101, log_file=start[0], log_pos=start[1], resume_stream=True, blocking=False,
        is_mariadb=False, only_schemas=["drc"], only_tables=["checkpoint"],
        only_events=[WriteRowsEvent, UpdateRowsEvent],
    )  # fmt: skip
    scns = []
    for event in reader:
        for row in event.rows:
            image = row.get("after_values") or row["values"]
            if image["channel"] == channel:
                scns.append(SCN.parse(image["scn"]))
    reader.close()
    return scns
