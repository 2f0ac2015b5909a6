"""The rules conflict resolution decides by: row versions and user resolvers.

Pure. drc.conflicts.policies says what each policy does with them; drc.conflicts.engine applies
them to a group's changes. A version is ``(timestamp, datacenter)``: the newer timestamp wins,
and equal ones go to the datacenter listed first in ``conflicts.priority``.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from drc.core.errors import ConfigError
from drc.core.scn import SCN
from drc.core.target_errors import ApplyError
from drc.core.values import utc_naive

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ConflictContext:
    """What a resolver is told besides the rows."""

    channel: str
    origin: str  # the datacenter the incoming change comes from
    datacenter: str  # this datacenter, which decides
    scn: SCN
    origin_time: dt.datetime | None
    schema: str
    table: str
    kind: str
    key: Mapping[str, Any]
    # With a timestamp column (conflicts.tables.column): when the local row was deleted (its
    # tombstone; None while it exists or if nothing is known), and when the incoming delete was
    # made (None unless the incoming change is a delete).
    local_deleted_at: Any = None
    incoming_deleted_at: Any = None


ResolverFn = Callable[[Row | None, Row | None, Row | None, ConflictContext], Row | None]


class ResolverError(ApplyError):
    """A user resolver raised or returned something unusable; the channel stops unapplied."""


def load_resolver(spec: str) -> ResolverFn:
    """The function named ``module:function`` (ConfigError saying what is wrong otherwise)."""
    module_name, _, function_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of user code
        raise ConfigError(
            f"conflict resolver {spec!r}: cannot import {module_name}: {exc}"
        ) from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(
            f"conflict resolver {spec!r}: {module_name} has no function {function_name}"
        )
    return function  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- versions


def stamp_key(value: Any) -> tuple[int, Any]:
    """A sortable form of a timestamp column value (NULL and zero dates sort first)."""
    if isinstance(value, dt.datetime):
        return (1, utc_naive(value))
    if isinstance(value, dt.date):
        return (1, dt.datetime(value.year, value.month, value.day))
    if isinstance(value, int | float | Decimal):
        return (1, value)
    return (0, 0)  # NULL, zero dates (ZeroDate or their text) and other non-instants


def derived_delete_stamp(commit_second: int, row_stamp: Any) -> Any:
    """The time of a delete that came without its tombstone row (no DRC trigger on the table
    when it ran): what the trigger would write, ``GREATEST(NOW(6), OLD.ts + step)``, with the
    commit second for NOW. A pure function of the captured delete, so the origin's own
    derivation (drc.apply.lww_guard) and every receiving channel agree on it."""
    if isinstance(row_stamp, int) and not isinstance(row_stamp, bool):
        return max(commit_second * 1000, row_stamp + 1)  # BIGINT milliseconds
    when = dt.datetime.fromtimestamp(commit_second, dt.UTC).replace(tzinfo=None)
    if isinstance(row_stamp, dt.datetime):
        return max(when, utc_naive(row_stamp) + dt.timedelta(microseconds=1))
    return when  # NULL or a zero date: the commit second alone


@dataclass(frozen=True, slots=True)
class Version:
    stamp: Any
    datacenter: str


class Ranks:
    """``conflicts.priority``: the first datacenter wins ties."""

    def __init__(self, priority: Sequence[str]) -> None:
        self._rank = {dc: len(priority) - i for i, dc in enumerate(priority)}

    def newer(self, a: Version, b: Version | None) -> bool:
        """Whether version ``a`` beats ``b`` (any version beats none)."""
        if b is None:
            return True
        ka, kb = stamp_key(a.stamp), stamp_key(b.stamp)
        if ka != kb:
            return ka > kb
        return self._rank.get(a.datacenter, 0) > self._rank.get(b.datacenter, 0)
