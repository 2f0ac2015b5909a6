"""The one exception tree of DRC.

    DrcError                      root: catch this to catch anything DRC raises on purpose
    +-- RetriableError            the same call may succeed later (server down, lock wait, timeout)
    |   +-- BufferLockedError     another writer holds the EventBuffer directory
    +-- FatalError                retrying will not help; an operator must act
        +-- MalformedScnError     an SCN's text or bytes are not an SCN
        +-- CorruptRecordError    encoded bytes fail their length, CRC or structure checks
        +-- UnsupportedValueError a value the codec has no exact encoding for
        +-- SandboxError          the local sandbox could not be started, stopped or read
        +-- OutOfOrderAppendError an EventBuffer append whose SCN does not follow the last
        +-- ScnTooOldError        a read after an SCN the EventBuffer no longer holds
        +-- BufferStateError      an EventBuffer directory that cannot be used as it is

Adapters translate driver exceptions into this tree at the boundary (``raise ... from exc``), so
callers decide on retry or stop by class, never by parsing messages. Every message says what
triggered it and what to do next.
"""

from __future__ import annotations


class DrcError(Exception):
    """Root of every error DRC raises on purpose."""


class RetriableError(DrcError):
    """A transient failure: the operation may be retried as it is."""


class FatalError(DrcError):
    """A failure retrying cannot fix: bad input, corrupt data or a misconfiguration."""


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


class UnsupportedColumnError(FatalError):
    """A column type the replicator cannot decode exactly; the message names table and column."""


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
    resume after; an older position must be served from the source binlog or a snapshot.
    """

    def __init__(self, message: str, oldest: object) -> None:
        super().__init__(message)
        self.oldest = oldest


class BufferLockedError(RetriableError):
    """Another writer holds an EventBuffer directory's lock; retry once it has stopped."""


class BufferStateError(FatalError):
    """An EventBuffer directory that cannot be used as it is: missing or invalid buffer.json,
    a gap in segment numbers, a segment from another epoch, a writer that failed earlier, or a
    buffer recreated under a reader. The message names the directory and what to do."""
