"""What a MySQL server's failures become in DRC's one exception tree.

The classes are the core's (drc.core.target_errors: apply, conflict handling and catch-up all
raise or catch them); the reading of a driver error is here, once (:func:`translate`)::

    server or client code                       becomes
    1062 duplicate key                          DuplicateKey (not an error of the tree: the
                                                idempotent writes of drc.apply.plan take
                                                another path on it)
    socket closed or reset (OSError, EOF)       TargetUnavailableError
    1213 deadlock, 1205 lock wait timeout       LockConflictError (retry the transaction whole)
    1290, 1836 read-only                        TargetReadOnlyError (wait)
    1114 table full, 1021 disk full             TargetFullError (wait)
    2002/2003/2006/2013/2055, 1053, 1927, 1040  TargetUnavailableError (wait, reconnect)
    anything else                               ApplyError (fatal), the code kept

Callers decide by class, never by a code. Pure: no driver is imported here (drc.mysql.driver has
the driver's exception types).
"""

from __future__ import annotations

from enum import Enum

from drc.core.target_errors import (
    ApplyError,
    LockConflictError,
    TargetFullError,
    TargetReadOnlyError,
    TargetUnavailableError,
)


class DuplicateKey(Exception):
    """The statement hit a duplicate key (1062); raised by the executor given to
    drc.apply.plan.run, which falls back to another statement."""


class Kind(Enum):
    LOCK_CONFLICT = "lock conflict"
    UNAVAILABLE = "unavailable"
    READ_ONLY = "read-only"
    FULL = "full"
    FATAL = "fatal"


DUPLICATE_KEY = 1062
LOCK_CONFLICT_CODES = frozenset({1213, 1205})
UNAVAILABLE_CODES = frozenset({0, 1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055})
READ_ONLY_CODES = frozenset({1290, 1836})
FULL_CODES = frozenset({1114, 1021})  # ER_RECORD_FILE_FULL, ER_DISK_FULL


def classify(code: int | None) -> Kind:
    """What a server or client error code means for a writer (0: a closed connection)."""
    if code in LOCK_CONFLICT_CODES:
        return Kind.LOCK_CONFLICT
    if code in READ_ONLY_CODES:
        return Kind.READ_ONLY
    if code in FULL_CODES:
        return Kind.FULL
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
    if kind is Kind.FULL:
        return TargetFullError(
            f"target is full, refused {what}: ({code}) {text}; waiting until space is freed "
            "on the target (its disk, or the table's size limit)"
        )
    if kind is Kind.UNAVAILABLE:
        return TargetUnavailableError(f"target unavailable while {what}: ({code}) {text}")
    return ApplyError(f"target rejected {what}: ({code}) {text}", code)
