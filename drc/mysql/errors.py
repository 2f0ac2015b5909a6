"""What a MySQL server's failures become in DRC's one exception tree (drc.core.errors).

    DrcError
    +-- RetriableError
    |   +-- LockConflictError       deadlock (1213) or lock wait timeout (1205): the server rolled
    |   |                           the statement or the transaction back; run it all again
    |   +-- TargetUnavailableError  the server is down or dropped the connection (2003/2006/2013..)
    |       +-- TargetReadOnlyError the server refuses writes (read_only, 1290/1836)
    +-- FatalError
        +-- ApplyError              the server rejected a statement for another reason
            +-- TargetTlsError      TLS refused the connection (untrusted certificate, wrong
                                    host name, no TLS on the server): fix the tls keys
    DuplicateKey                    a duplicate key (1062): not an error of the tree, the
                                    idempotent writes of drc.apply.plan take another path on it

:func:`translate` is the one place a driver error is read (its code and message); callers decide
by class, never by a code. drc.apply.errors adds apply's own leaves (catch-up running, schema
mismatches, exhausted retries). Pure: no driver is imported here (drc.mysql.connect has the
driver's exception types).
"""

from __future__ import annotations

from enum import Enum

from drc.core.errors import FatalError, RetriableError


class LockConflictError(RetriableError):
    """The server aborted the transaction for a deadlock or lock wait timeout; retry it whole."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class TargetUnavailableError(RetriableError):
    """The database cannot be reached or dropped the connection; wait and reconnect."""


class TargetReadOnlyError(TargetUnavailableError):
    """The database is read-only (e.g. a demoted primary during a switchover); wait for writes."""


class ApplyError(FatalError):
    """The server rejected a statement; ``code`` is the server's error number (or None)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class TargetTlsError(ApplyError):
    """TLS refused the connection; reconnecting cannot fix a certificate."""


class DuplicateKey(Exception):
    """The statement hit a duplicate key (1062); raised by the executor given to
    drc.apply.plan.run, which falls back to another statement."""


class Kind(Enum):
    LOCK_CONFLICT = "lock conflict"
    UNAVAILABLE = "unavailable"
    READ_ONLY = "read-only"
    FATAL = "fatal"


DUPLICATE_KEY = 1062
LOCK_CONFLICT_CODES = frozenset({1213, 1205})
UNAVAILABLE_CODES = frozenset({0, 1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055})
READ_ONLY_CODES = frozenset({1290, 1836})


def classify(code: int | None) -> Kind:
    """What a server or client error code means for a writer (0: a closed connection)."""
    if code in LOCK_CONFLICT_CODES:
        return Kind.LOCK_CONFLICT
    if code in READ_ONLY_CODES:
        return Kind.READ_ONLY
    if code in UNAVAILABLE_CODES:
        return Kind.UNAVAILABLE
    return Kind.FATAL


def translate(exc: BaseException, what: str) -> BaseException:
    """The DRC error for a driver error (or a broken socket) met while doing ``what``."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    text = exc.args[1] if len(exc.args) > 1 else str(exc)
    if code == DUPLICATE_KEY:
        return DuplicateKey(f"{what}: {text}")
    if isinstance(exc, OSError | EOFError):
        return TargetUnavailableError(f"target connection failed while {what}: {exc}")
    kind = classify(code)
    if kind is Kind.LOCK_CONFLICT:
        return LockConflictError(f"target aborted {what}: ({code}) {text}", code or 0)
    if kind is Kind.READ_ONLY:
        return TargetReadOnlyError(f"target is read-only, refused {what}: ({code}) {text}")
    if kind is Kind.UNAVAILABLE:
        return TargetUnavailableError(f"target unavailable while {what}: ({code}) {text}")
    return ApplyError(f"target rejected {what}: ({code}) {text}", code)
