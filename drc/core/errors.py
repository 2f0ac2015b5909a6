"""The one exception tree of DRC.

    DrcError                          root: catch this to catch anything DRC raises on purpose
    +-- RetriableError                the same call may succeed later
    |   +-- BufferLockedError         another writer holds the EventBuffer directory
    |   +-- SourceUnavailableError    the source database is unreachable or dropped the stream
    |   +-- MetaStoreUnavailableError the metastore file stayed locked past its busy timeout
    |   +-- BufferFullError           the EventBuffer's filesystem is full: wait for space
    +-- FatalError                    retrying will not help; an operator must act
        +-- MalformedScnError         an SCN's text or bytes are not an SCN
        +-- CorruptRecordError        encoded bytes fail their length, CRC or structure checks
        +-- UnsupportedValueError     a value the codec has no exact encoding for
        +-- SandboxError              the local sandbox could not be started, stopped or read
        +-- OutOfOrderAppendError     an EventBuffer append whose SCN does not follow the last
        +-- ScnTooOldError            a read after an SCN the EventBuffer no longer holds
        +-- BufferStateError          an EventBuffer directory that cannot be used as it is
        +-- SourceConfigError         the source's binlog settings cannot be replicated exactly
        +-- BinlogPurgedError         the binlog needed to resume is gone (never skip ahead)
        +-- SourceDivergedError       a source lacks what the buffer holds, or is another DC's
        +-- UnsupportedColumnError    a column type the replicator cannot decode exactly
        +-- UnsupportedTransactionError  a source transaction capture cannot store (two-phase XA)
        +-- ConfigError               a config file that is missing, unreadable or invalid
        +-- GaveUp (drc.core.retry)   a retriable failure outlasted its retry policy's limit
        +-- MetaStoreError            the schema history file cannot be used
            +-- MetaStoreCorruptError       not a readable DRC metastore
            +-- SchemaHistoryConflictError  history would be rewritten at an older SCN

The errors of the database apply writes into are in drc.core.target_errors (apply, conflict
handling and bulk catch-up raise them all); other packages add leaves for their own failures
(drc.client.errors, drc.api.server) under the same two branches.

Adapters translate driver exceptions into this tree at the boundary (``raise ... from exc``), so
callers decide on retry or stop by class, never by parsing messages. Every message says what
triggered it and what to do next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # scn.py imports this module at run time
    from drc.core.scn import SCN


class DrcError(Exception):
    """Root of every error DRC raises on purpose."""


class RetriableError(DrcError):
    """A transient failure: the operation may be retried as it is."""


class FatalError(DrcError):
    """A failure retrying cannot fix: bad input, corrupt data or a misconfiguration.

    ``stoppage``: an apply channel stopped by it names the transaction it stopped at here
    (drc.apply.control.Stoppage), for the operator to skip or fix; None until then, and
    wherever else it is raised."""

    stoppage: object = None


class MalformedScnError(FatalError, ValueError):
    """Text or bytes given as an SCN do not parse; the message names the problem."""


class CorruptRecordError(FatalError):
    """Encoded bytes failed a framing, CRC or structure check.

    ``offset`` is where the bad record starts in the buffer that was being decoded, so a reader
    can report the exact place (segment and offset) to the operator.
    """

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


class UnsupportedValueError(FatalError, TypeError):
    """A column value of a type the codec cannot encode exactly."""


class SandboxError(FatalError):
    """The local sandbox servers could not be started, stopped or described."""


class SourceUnavailableError(RetriableError):
    """The source database could not be reached or dropped the binlog connection."""


class SourceConfigError(FatalError):
    """The source database is configured in a way DRC cannot replicate correctly.

    The message names the setting, the value found and the fix.
    """


class BinlogPurgedError(FatalError):
    """The binlog needed to resume was purged from the source: continuing would skip changes."""


class SourceDivergedError(FatalError):
    """A source server (after a failover, or misconfigured) does not contain the transactions
    the buffer already holds: it diverged, lags behind, or belongs to another replication
    group. Capturing from it would silently lose or mix changes; the message names the buffer's
    GTID position and the server's."""


class UnsupportedColumnError(FatalError):
    """A column type the replicator cannot decode exactly; the message names table and column."""


class UnsupportedTransactionError(FatalError):
    """A source transaction capture cannot store exactly (a two-phase XA transaction): capture
    stops at it rather than lose its rows; the message names its position, XA id and the fix."""


class ConfigError(FatalError):
    """A configuration file that is missing, unreadable or invalid; names the file and field."""


class OutOfOrderAppendError(FatalError):
    """An EventBuffer append whose SCN does not follow the last one appended.

    SCNs must strictly increase; the only repeat allowed is the next fragment of a transaction
    whose previous fragment was appended with ``more=True``, and such a transaction must be
    finished before another SCN starts. Appending out of order is a bug in the caller: the
    buffer is left unchanged.
    """


class ScnTooOldError(FatalError):
    """A read after an SCN older than the oldest one an EventBuffer can still serve.

    Retention deleted the records after that SCN. ``oldest`` is the oldest SCN a reader may
    resume after (None when the reporter did not say); an older position must be served from
    the source binlog or a snapshot.
    """

    def __init__(self, message: str, oldest: SCN | None) -> None:
        super().__init__(message)
        self.oldest = oldest


class BufferLockedError(RetriableError):
    """Another writer holds an EventBuffer directory's lock; retry once it has stopped."""


class BufferFullError(RetriableError):
    """The EventBuffer's filesystem has no room for what was appended: nothing is lost (it
    stays pending in the writer, which stays usable) and the same call succeeds once space is
    freed. Capture waits for it (drc.replicator.room)."""


class BufferStateError(FatalError):
    """An EventBuffer directory that cannot be used as it is: missing or invalid buffer.json,
    a gap in segment numbers, a segment from another epoch, a writer that failed earlier, or a
    buffer recreated under a reader. The message names the directory and what to do."""


class MetaStoreError(FatalError):
    """The metastore file cannot be opened or written; the message names the file."""


class MetaStoreCorruptError(MetaStoreError):
    """The file is not a readable DRC metastore (not SQLite, damaged, or foreign tables)."""


class SchemaHistoryConflictError(MetaStoreError):
    """A different schema or DDL was recorded at an SCN older than the table's newest entry.

    A replay records exactly what is already there; a difference means the source's history is
    not what it was (a different or rewritten source) and rewriting ours would mis-decode rows
    already in the buffer.
    """


class MetaStoreUnavailableError(RetriableError):
    """The file is locked by another writer longer than the busy timeout; retry later."""


SHOWN_CHARS = 200


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` quoted for an error message, cut after ``limit`` characters (``...``): input
    echoed back to whoever sent it stays readable however long it was."""
    if len(text) > limit:
        return repr(text[:limit]) + f"... ({len(text)} chars)"
    return repr(text)


class FencedError(FatalError):
    """An append refused by replicator-group fencing: this member may no longer lead (its
    lease ran out or a newer term exists), or records came from a deposed leader's term."""


class GroupConfigError(FatalError):
    """A replicator group member that must not join: its identity is taken, or it belongs to
    another datacenter or source; the message says which and what to change."""
