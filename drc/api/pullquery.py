"""The query of ``GET /v1/events`` and ``GET /v1/stream``: each parameter's name, values,
default and meaning, parsed strictly from raw text into a :class:`PullQuery`.

A new pull parameter is a change to this file alone: its name in ``_KNOWN``, its parsing and
default in :func:`parse_pull_query`, and what it does in :class:`Selection` (what is sent) or
:class:`Limits` (how much one batch holds). drc.api.batching, pull, events and stream apply
those without naming any parameter; the SDK sends one once drc.client.subscriber has a keyword
for it.

Pure (no FastAPI, no I/O): the SDK imports the names from here. Every problem raises
:class:`BadQuery` naming the parameter, the value and what is expected; the handler answers 400
with that message. Unknown and repeated parameters are refused (a typo never silently falls back
to a default). Limits above the server's are clamped to them, not refused: the server's limits
are an operator's choice a client cannot know.

DRC-applied transactions stored without their rows (``[replicator] drc_applied = "marker"``,
records flagged ``rows_omitted``, see drc.core.codec): ``skip_drc=1`` leaves them out like any
DRC-originated transaction. Without it a pull must say ``drc_applied=marker`` to receive them
(they pass any ``tables`` filter, as which tables they wrote is not stored); otherwise a
replicator in marker mode refuses the pull at once, and any replicator refuses a batch that
would hold such a record, with 409 ``rows_omitted``, so no subscriber takes a transaction
without its rows for one that wrote nothing.

``wait_ms``: ``-1`` answers with what is there now; ``>0`` waits up to that many ms but answers
as soon as one matching transaction is there (latency first); ``0`` waits until the batch is
full (``max_events`` transactions or ``max_bytes`` record bytes), at most the server's
``max_wait_ms`` (Canal's "wait until full").
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from drc.core.errors import MalformedScnError, shown
from drc.core.events import RowChange, Transaction
from drc.core.range_filter import RangeFilter
from drc.core.rowfilter import PerTable, Predicate, RowFilterError, filtered, parse
from drc.core.scn import SCN
from drc.core.selection import selects_ddl
from drc.core.tablefilter import TableFilter, TableFilterError

PARAM_AFTER = "after"
PARAM_TABLES = "tables"
PARAM_MAX_EVENTS = "max_events"
PARAM_MAX_BYTES = "max_bytes"
PARAM_WAIT_MS = "wait_ms"
PARAM_EPOCH = "epoch"
PARAM_SKIP_DRC = "skip_drc"
# How a pull without skip_drc takes DRC-originated transactions stored without their rows
# (a replicator with [replicator] drc_applied = "marker"): "full" (the default) refuses them
# with 409 rows_omitted, "marker" receives them as records flagged rows_omitted.
PARAM_DRC_APPLIED = "drc_applied"
DRC_APPLIED_FULL = "full"
DRC_APPLIED_MARKER = "marker"
# A subscriber's row filters: a JSON object {"db.table pattern": "predicate"}
# (drc.core.rowfilter; the first pattern a table matches wins).
PARAM_ROWS = "rows"
PARAM_SPLIT = "split"
PARAM_WITHIN = "within"
MAX_ROWS_PARAM = 16384  # characters of its value
_KNOWN = (
    PARAM_AFTER,
    PARAM_TABLES,
    PARAM_MAX_EVENTS,
    PARAM_MAX_BYTES,
    PARAM_WAIT_MS,
    PARAM_EPOCH,
    PARAM_SKIP_DRC,
    PARAM_DRC_APPLIED,
    PARAM_ROWS,
)

# wait_ms values with a special meaning; any other positive value waits up to that many ms
# but returns as soon as one matching transaction is there (latency first).
WAIT_NONE = -1  # return what is there now
WAIT_FULL = 0  # wait until the batch is full, capped at the server's max_wait_ms

DEFAULT_MAX_EVENTS = 1000
_INT = re.compile(r"-?[0-9]{1,18}", re.ASCII)  # bounded: no huge-int parsing of hostile input
_EPOCH = re.compile(r"[0-9A-Za-z-]{1,64}", re.ASCII)
_BOOLS = {"0": False, "1": True, "false": False, "true": True}
_MAX_SHOWN = 60


class BadQuery(ValueError):
    """A query parameter that is missing, malformed or out of range; the message says which."""


# A stored record's (drc_originated, (schema, table) of each row change, DDL statements), as
# drc.core.codec.peek_tables reads it without decoding the rows.
Peek = tuple[bool, Collection[tuple[str, str]], int]


@dataclass(frozen=True, slots=True)
class Selection:
    """Which transactions and row changes a subscriber wants, per stored transaction (its
    records share one SCN; fragments 0.. with the last one flagged ``last_fragment``).
    drc.api.batching asks it only through its members below, so a parameter that narrows what
    is sent is a field here and its part in each of them.

    - ``skip_drc``: a transaction flagged ``drc_originated`` is dropped whole.
    - ``markers``: without ``skip_drc``, a DRC-originated transaction stored without its rows
      (``rows_omitted``) is sent as stored, whatever the ``tables`` filter (its tables are not
      known); without ``markers`` meeting one raises the API's 409 (batching's RowsOmitted).
    - ``tables``: each fragment keeps the row changes of matching tables and the DDL that names
      a matching table (:func:`drc.core.selection.selects_ddl`), or, naming no table (CREATE
      DATABASE, GRANT, ...), runs in a database the filter could match.
    - ``rows``: row changes of a table with a predicate are narrowed to the rows it passes,
      an update that moves a row in or out of it sent as an insert or a delete
      (:func:`drc.core.rowfilter.filtered`); RowFilterColumnError when a change lacks a
      column a predicate names (the API's 400).
    """

    tables: TableFilter = TableFilter()
    skip_drc: bool = False
    markers: bool = False  # takes records stored without their rows (drc_applied=marker)
    rows: PerTable[Predicate] | None = field(default=None, compare=False)
    # A consumer group's range (drc.api.groups): its row changes only, no DDL; raises
    # drc.core.range_filter.Barrier before a key moved in from a range not yet past it.
    ranges: RangeFilter | None = field(default=None, compare=False)

    @property
    def refuses_markers(self) -> bool:
        return not (self.skip_drc or self.markers)

    @property
    def passes_everything(self) -> bool:
        """Every stored record is sent as stored: no record's content is read."""
        return (
            self.tables.matches_everything
            and not self.skip_drc
            and self.rows is None
            and self.ranges is None
        )

    def whole(self, peeks: Sequence[Peek]) -> bool | None:
        """From the peeks of a transaction's records: False to drop it, True to send its records
        as stored (each has row changes, all of matching tables, and no DDL); None when only its
        decoded rows tell (:meth:`drops`, :meth:`narrow`)."""
        if self.skip_drc and any(drc for drc, _tables, _ddl in peeks):
            return False
        if self.ranges is not None:
            return None
        match = self.tables.matches
        rows = self.rows
        last = len(peeks) - 1
        for index, (_drc, tables, ddl) in enumerate(peeks):
            if not tables and not ddl and 0 < index == last:
                # The empty last fragment of a large transaction (capture flushed its rows at
                # the fragment limit before the commit): sent anyway once the others are, as
                # narrowing would, so it must not cost a decode of every row before it.
                continue
            if ddl or not tables or not all(match(db, table) for db, table in tables):
                return None
            if rows is not None and any(rows.get(db, table) for db, table in tables):
                return None
        return True

    def drops(self, txns: Sequence[Transaction]) -> bool:
        """Whether a decoded transaction (its fragments) is left out whole."""
        return self.skip_drc and any(t.drc_originated for t in txns)

    def narrow(self, txn: Transaction, previous: SCN | None = None) -> Transaction:
        """``txn`` with only the wanted row changes and DDL (``txn`` itself if all are);
        ``previous`` is the SCN examined before it (a group range's barrier)."""
        txn = self._narrow(txn)
        if self.ranges is not None:
            txn = self.ranges.narrow(txn, txn.scn if previous is None else previous)
        return txn

    def _narrow(self, txn: Transaction) -> Transaction:
        tables = self.tables
        if not tables.matches_everything:
            match = tables.matches
            changes = tuple(c for c in txn.changes if match(c.schema, c.table))
            ddl = tuple(d for d in txn.ddl if selects_ddl(tables, d))
            if len(changes) != len(txn.changes) or len(ddl) != len(txn.ddl):
                txn = dataclasses.replace(txn, changes=changes, ddl=ddl)
        if self.rows is None:
            return txn
        rows = self.rows
        kept = [_filtered(rows.get(c.schema, c.table), c) for c in txn.changes]
        if all(k is c for k, c in zip(kept, txn.changes, strict=True)):
            return txn
        return dataclasses.replace(txn, changes=tuple(k for k in kept if k is not None))


def _filtered(predicate: Predicate | None, change: RowChange) -> RowChange | None:
    return change if predicate is None else filtered(predicate, change)


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one batch holds. drc.api.batching asks it only through :meth:`allows` and
    :meth:`room`, so a bound on a batch's transactions or bytes is a field here and its part in
    both. The first transaction is sent whole, whatever it holds."""

    max_events: int
    max_bytes: int

    def __post_init__(self) -> None:
        if self.max_events < 1 or self.max_bytes < 1:
            raise ValueError(f"limits must be >= 1, got {self.max_events}, {self.max_bytes}")

    def allows(self, transactions: int, size: int) -> bool:
        """Whether a batch of ``transactions`` holding ``size`` record bytes is within them."""
        return transactions <= self.max_events and size <= self.max_bytes

    def room(self, transactions: int, size: int) -> tuple[int, int]:
        """The most records and bytes that may still fit after that many: what a pull that
        sends every stored record reads at once."""
        return self.max_events - transactions, self.max_bytes - size


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The operator's clamps (from ApiConfig)."""

    max_events: int = 10_000
    max_bytes: int = 16 << 20
    max_wait_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class PullQuery:
    after: SCN
    selection: Selection
    limits: Limits
    wait_ms: int  # WAIT_NONE, WAIT_FULL, or a positive wait (clamped)
    epoch: str | None
    max_wait_ms: int = 0  # the longest this pull may wait, whatever the mode

    @property
    def waits(self) -> bool:
        """Whether the pull may wait for commits (a long poll)."""
        return self.wait_ms != WAIT_NONE

    @property
    def wait_s(self) -> float:
        return max(self.max_wait_ms, 0) / 1000


def parse_pull_query(params: Sequence[tuple[str, str]], server: ServerLimits) -> PullQuery:
    """Parse the query's (name, value) pairs, in order as sent."""
    values = single_values(params)
    text = values.get(PARAM_AFTER)
    if text is None:
        raise BadQuery("after is required: the SCN to read after (0:0:0:0 for the beginning)")
    try:
        after = SCN.parse(text)
        tables = TableFilter.parse_list(values.get(PARAM_TABLES, ""))
    except (MalformedScnError, TableFilterError) as exc:
        name = PARAM_TABLES if isinstance(exc, TableFilterError) else PARAM_AFTER
        raise BadQuery(f"{name}: {exc}") from exc
    max_events = _int(values, PARAM_MAX_EVENTS, 1, min(DEFAULT_MAX_EVENTS, server.max_events))
    max_bytes = _int(values, PARAM_MAX_BYTES, 1, server.max_bytes)
    wait_ms = _int(values, PARAM_WAIT_MS, WAIT_NONE, WAIT_NONE)
    return PullQuery(
        after=after,
        selection=Selection(
            tables,
            _bool(values, PARAM_SKIP_DRC),
            _drc_applied(values) == DRC_APPLIED_MARKER,
            _rows(values),
        ),
        limits=Limits(min(max_events, server.max_events), min(max_bytes, server.max_bytes)),
        wait_ms=min(wait_ms, server.max_wait_ms) if wait_ms > 0 else wait_ms,
        epoch=_epoch(values),
        max_wait_ms=_longest_wait(wait_ms, server.max_wait_ms),
    )


def _longest_wait(wait_ms: int, server_max_ms: int) -> int:
    if wait_ms == WAIT_NONE:
        return 0
    return server_max_ms if wait_ms == WAIT_FULL else min(wait_ms, server_max_ms)


def single_values(
    params: Sequence[tuple[str, str]], known: Sequence[str] = _KNOWN
) -> dict[str, str]:
    """The parameters by name; BadQuery for an unknown or repeated one."""
    values: dict[str, str] = {}
    for name, value in params:
        if name not in known:
            raise BadQuery(f"unknown parameter {_show(name)}; known: {', '.join(known)}")
        if name in values:
            raise BadQuery(f"{name} is given more than once")
        values[name] = value
    return values


def _int(values: dict[str, str], name: str, low: int, default: int) -> int:
    text = values.get(name)
    if text is None:
        return default
    if not _INT.fullmatch(text):
        raise BadQuery(f"{name} must be a decimal integer >= {low}, got {_show(text)}")
    value = int(text)
    if value < low:
        raise BadQuery(f"{name} must be >= {low}, got {value}")
    return value


def _bool(values: dict[str, str], name: str) -> bool:
    text = values.get(name, "0")
    if text not in _BOOLS:
        raise BadQuery(f"{name} must be 0 or 1, got {_show(text)}")
    return _BOOLS[text]


def _drc_applied(values: dict[str, str]) -> str:
    text = values.get(PARAM_DRC_APPLIED, DRC_APPLIED_FULL)
    if text not in (DRC_APPLIED_FULL, DRC_APPLIED_MARKER):
        raise BadQuery(
            f"{PARAM_DRC_APPLIED} must be {DRC_APPLIED_FULL!r} or "
            f"{DRC_APPLIED_MARKER!r}, got {_show(text)}"
        )
    return text


def _rows(values: dict[str, str]) -> PerTable[Predicate] | None:
    text = values.get(PARAM_ROWS)
    if text is None:
        return None
    if len(text) > MAX_ROWS_PARAM:
        raise BadQuery(f"{PARAM_ROWS} is {len(text)} characters, more than {MAX_ROWS_PARAM}")
    example = '{"db.table": "column = \'value\'"}'
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if not isinstance(found, dict) or not found:
        raise BadQuery(f"{PARAM_ROWS} must be a JSON object like {example}, got {_show(text)}")
    predicates = {}
    for pattern, predicate in found.items():
        if not isinstance(predicate, str):
            raise BadQuery(f"{PARAM_ROWS} {_show(pattern)}: the predicate must be a string")
        try:
            TableFilter.build([pattern])
            predicates[pattern] = parse(predicate)
        except (TableFilterError, RowFilterError) as exc:
            raise BadQuery(f"{PARAM_ROWS} {_show(pattern)}: {exc}") from exc
    return PerTable(predicates)


def _epoch(values: dict[str, str]) -> str | None:
    text = values.get(PARAM_EPOCH)
    if text is not None and not _EPOCH.fullmatch(text):
        raise BadQuery(
            f"epoch must be a buffer epoch (hex text) from an earlier answer, got {_show(text)}"
        )
    return text


def _show(text: str) -> str:
    return shown(text, _MAX_SHOWN)
