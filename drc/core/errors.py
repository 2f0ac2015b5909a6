"""The one exception tree of DRC.

    DrcError                      root: catch this to catch anything DRC raises on purpose
    +-- RetriableError            the same call may succeed later (server down, lock wait, timeout)
    +-- FatalError                retrying will not help; an operator must act
        +-- MalformedScnError     an SCN's text or bytes are not an SCN
        +-- CorruptRecordError    encoded bytes fail their length, CRC or structure checks
        +-- UnsupportedValueError a value the codec has no exact encoding for
        +-- SandboxError          the local sandbox could not be started, stopped or read

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
