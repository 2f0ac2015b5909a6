"""Back to source: transactions older than the buffer, read again from the source binlog.

A pull after an SCN older than the buffer's oldest servable SCN (retention deleted it) is served
from the binlog while the source still has it (docs/source-failover.md). The SCN names the
binlog file (``log_index``); that file is read from its start, so the GTID position comes from
its GTID list event and every transaction is decoded exactly as capture decoded it: the same
adapter, the same capture filter and fragment limits, row images from the binlog's own
TABLE_MAP metadata (the schema as of that SCN). The transactions after ``after`` up to the
buffer's start get the same SCNs and encode to the same bytes as the records capture stored.

Empty transactions (the capture filter kept nothing) are not served, except that a read that
reaches the buffer's start ends with an empty marker at exactly that SCN, so the reader's
``next`` moves on to the buffer. Only SCNs read from the server capture reads now (same
change_id and server_id) can be read again; anything else, or a purged binlog file, is
ScnTooOldError (HTTP 410).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from drc.core.codec import encode_transaction
from drc.core.errors import ScnTooOldError
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.eventbuffer.reader import SOURCE_SEGMENT, Record
from drc.replicator.assembler import Committed, TransactionAssembler
from drc.replicator.replicator import Replicator
from drc.replicator.session_start import SessionStart
from drc.replicator.source import BinlogStream, inspect_source
from drc.replicator.spill import FileSpill

_FILE_START = 4


class BinlogBackfill:
    """``backfill(after, oldest, max_records, max_bytes)``: the records after ``after`` up to
    ``oldest`` (the buffer's oldest servable SCN), whole transactions, within the limits
    (the first transaction always whole). One read at a time: each uses a replica connection
    with server id ``replica_server_id + 1``."""

    def __init__(self, replicator: Replicator) -> None:
        self._replicator = replicator
        self._lock = threading.Lock()

    def __call__(self, after: SCN, oldest: SCN, max_records: int, max_bytes: int) -> list[Record]:
        start = self._replicator.current
        if after == SCN.ZERO:  # where the stream began is not kept once retention deleted it
            raise _gone(
                after,
                oldest,
                "a reader from the stream's beginning needs its first "
                "records, and retention deleted them",
            )
        if start is None or (after.change_id, after.server_id) != (
            start.change_id,
            start.info.server_id,
        ):
            reading = "nothing yet" if start is None else f"change_id {start.change_id}"
            raise _gone(
                after,
                oldest,
                f"it was read from another source server or change_id than capture reads now "
                f"({reading})",
            )
        with self._lock:
            info = inspect_source(start.settings)
            log_file = info.file_name(after.log_index)
            if log_file not in info.binlogs:
                raise _gone(after, oldest, f"binlog {log_file} was purged from the source")
            return self._read(start, log_file, after, oldest, max_records, max_bytes)

    def _read(
        self,
        start: SessionStart,
        log_file: str,
        after: SCN,
        oldest: SCN,
        max_records: int,
        max_bytes: int,
    ) -> list[Record]:
        options = self._replicator.options
        assembler = TransactionAssembler(
            start.info.server_id,
            start.change_id,
            options.capture,
            options.fragments,
            spill_factory=lambda: FileSpill(options.spill_dir),
            omit_drc_rows=options.omit_drc_rows,  # the records capture would have stored
            xa_ignored_until=(after.log_index, after.log_pos),  # not served: never refused
        )
        stream = BinlogStream(
            start.settings,
            log_file,
            _FILE_START,
            blocking=False,
            server_id=start.settings.replica_server_id + 1,
            skip_marked_rows=options.omit_drc_rows,
        )
        out: list[Record] = []
        size = 0
        try:
            for committed in _committed(stream, assembler):
                if committed.scn > oldest:
                    break  # the buffer's start was a position, not a transaction: mark it
                served = committed.scn > after and (not committed.empty or committed.scn == oldest)
                for fragment in committed.fragments():  # always drained: it frees the spill
                    if served and not committed.empty:
                        if options.mask is not None:  # served as capture stored it: masked
                            fragment = options.mask(fragment, committed.tables)
                        out.append(_record(fragment))
                        size += len(out[-1].payload)
                if served and committed.empty:
                    out.append(_record(_marker(committed)))
                if committed.scn == oldest or (
                    served and (len(out) >= max_records or size >= max_bytes)
                ):
                    return out
            else:
                raise _gone(after, oldest, "the source binlog ends before the buffer's start")
        finally:
            stream.close()
            assembler.reset()
        out.append(start_marker(oldest))
        return out


def _committed(stream: BinlogStream, assembler: TransactionAssembler) -> Iterator[Committed]:
    for event in stream.events(threading.Event()):
        committed = assembler.feed(event)
        if committed is not None:
            yield committed


def _marker(committed: Committed) -> Transaction:
    return Transaction(
        committed.scn,
        committed.scn.server_id,
        committed.gtid,
        0,
        (),
        gtid_position=committed.gtid_position,
    )


def start_marker(oldest: SCN) -> Record:
    """An empty record at the buffer's start ``oldest``: a reader's ``next`` moves on to it."""
    return _record(Transaction(oldest, oldest.server_id, None, 0, ()))


def _record(txn: Transaction) -> Record:
    return Record(
        txn.scn,
        encode_transaction(txn),
        txn.timestamp * 1000,
        not txn.last_fragment,
        SOURCE_SEGMENT,
        0,
    )


def _gone(after: SCN, oldest: SCN, why: str) -> ScnTooOldError:
    return ScnTooOldError(
        f"cannot read after SCN {after}: the buffer holds records only after SCN {oldest}, "
        f"and the source binlog cannot serve it again: {why}; resume this reader from a "
        "snapshot",
        oldest,
    )


__all__ = ["SOURCE_SEGMENT", "BinlogBackfill", "start_marker"]
