"""``drc.osc_pending``: the online schema change runs a replaying channel is in the middle of,
and the filter stage that replays their ALTER instead of their copy (drc.core.osc_replay).

    drc.osc_pending
    +-----------------+--------------+--------------------------------------------------------+
    | channel      PK | VARCHAR(64)  | ChannelConfig.name                                     |
    | schema_name  PK | VARCHAR(64)  | the database of the table the tool alters              |
    | table_name   PK | VARCHAR(64)  | the table the tool alters                              |
    | tool            | VARCHAR(32)  | pt-online-schema-change or gh-ost                      |
    | shadow          | VARCHAR(64)  | the tool's shadow table (_t_new, _t_gho), never here   |
    | state           | VARCHAR(8)   | "copying", or "cut" (the old table's DROP to come)     |
    | old_name        | VARCHAR(64)  | the original table's name after the cut-over           |
    | alters          | LONGTEXT     | JSON list: the clauses of each ALTER of the shadow     |
    | scn             | VARCHAR(96)  | the last source statement the row reflects             |
    +-----------------+--------------+--------------------------------------------------------+

Exactly once: the stage turns each statement that changes an entry into a row change of this
table (instead of the shadow's DDL, which is not run here), so the group writer commits it with
the checkpoint row that moves past the statement, like any replicated row. A cut-over's row
(state "cut") commits before its ALTERs run, with the checkpoint's ``pending_ddl_scn``
(drc.apply.channel); a crash before they finish redelivers the cut-over, which gives the same
ALTERs, and the DDL journal (drc.apply.ddl_journal) knows whether each ran. The stage reads
the channel's entries again whenever the channel (re)subscribes after its checkpoint
(:meth:`ReplayOnlineSchemaChange.load`), so what it holds is always the target's state at the
checkpoint plus the transactions taken since.

Bulk catch-up (drc.catchup): every statement that changes an entry is DDL, and every DDL is a
step of its own, which the driver runs through this stage in stream order
(drc.catchup.executor.ddl_chain) and applies through the streaming channel's DDL path, so
inside a span the entries are fixed: the executors read them from the target and the stage
decides a row change by its table's name alone, as their fast path needs. A statement at or
before an entry's SCN changes nothing again, so a range seen twice (a resumed run, a rewind,
a parallel group's redelivery) converges.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from drc.apply.control import Stoppage
from drc.core.errors import FatalError
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.osc_replay import COPYING, Alter, Key, Pending, UnexpectedChange, replay
from drc.core.scn import SCN
from drc.core.statements import for_log
from drc.mysql.sql import Statement, ident, quote

if TYPE_CHECKING:  # drc.apply.target imports drc.apply.checkpoint, which creates this table
    from drc.apply.target import Target

log = logging.getLogger(__name__)

TABLE = "osc_pending"
_TABLE = f"{ident(CHECKPOINT_SCHEMA)}.{ident(TABLE)}"


def create_statement() -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {_TABLE} (`channel` VARCHAR(64) NOT NULL, "
        "`schema_name` VARCHAR(64) NOT NULL, `table_name` VARCHAR(64) NOT NULL, "
        "`tool` VARCHAR(32) NOT NULL, `shadow` VARCHAR(64) NOT NULL, `state` VARCHAR(8) NOT "
        "NULL, `old_name` VARCHAR(64) NOT NULL, `alters` LONGTEXT NOT NULL, `scn` VARCHAR(96) "
        "NOT NULL, PRIMARY KEY (`channel`, `schema_name`, `table_name`)) ENGINE=InnoDB "
        "DEFAULT CHARSET=utf8mb4"
    )


_COLUMNS = ("schema_name", "table_name", "tool", "shadow", "state", "old_name", "alters", "scn")


def select(channel: str) -> Statement:
    columns = ", ".join(ident(c) for c in _COLUMNS)
    return Statement(f"SELECT {columns} FROM {_TABLE} WHERE `channel` = %s", (channel,))


def parse(rows: Iterable[tuple[object, ...]]) -> dict[Key, Pending]:
    found = {}
    for schema, table, tool, shadow, state, old, alters, scn in rows:
        entry = Pending(
            str(schema), str(table), str(tool), str(shadow), SCN.parse(str(scn)),
            tuple(json.loads(str(alters))), str(state), str(old),
        )  # fmt: skip
        found[entry.key] = entry
    return found


def image(channel: str, entry: Pending) -> dict[str, object]:
    """The entry's row, as a row change carries it."""
    return {
        "channel": channel, "schema_name": entry.schema, "table_name": entry.table,
        "tool": entry.tool, "shadow": entry.shadow, "state": entry.state,
        "old_name": entry.old, "alters": json.dumps(list(entry.alters)), "scn": str(entry.scn),
    }  # fmt: skip


def alter_statement(alter: Alter) -> str:
    """The cut-over's ALTER, run without parameters (DDL): names quoted, clauses as written."""
    return f"ALTER TABLE {quote(alter.schema)}.{quote(alter.table)} {alter.clauses}"


class ReplayOnlineSchemaChange:
    """The filter stage of a channel with ``online_schema_change = "replay"``."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.entries: dict[Key, Pending] = {}

    def load(self, target: Target) -> None:
        """The channel's entries as the target holds them (at its checkpoint)."""
        rows = target.query(select(self.channel), "reading the pending online schema changes")
        target.commit()
        self.entries = parse(rows)

    def __call__(self, txn: Transaction) -> Transaction | None:
        if not txn.ddl and not self._copying_rows(txn):
            return txn
        try:
            out = replay(self.entries, txn)
        except UnexpectedChange as exc:
            raise self._stop(txn, exc) from exc
        writes = []
        for key, entry in out.updates.items():
            before = self.entries.get(key)
            old = None if before is None else image(self.channel, before)
            new = None if entry is None else image(self.channel, entry)
            if entry is None:
                self.entries.pop(key, None)
            else:
                self.entries[key] = entry
            if old is not None or new is not None:
                op = Op.INSERT if old is None else Op.DELETE if new is None else Op.UPDATE
                writes.append(RowChange(CHECKPOINT_SCHEMA, TABLE, op, old, new))
            state = "forgotten" if entry is None else entry.state
            log.info("channel %s: online schema change of %s.%s at %s: %s",
                     self.channel, key[0], key[1], txn.scn, state)  # fmt: skip
        ddl = tuple(
            d if isinstance(d, SchemaChange) else SchemaChange(d.schema, alter_statement(d))
            for d in out.ddl
        )
        changes = (*out.changes, *writes)
        if not changes and not ddl:
            return None
        return dataclasses.replace(txn, changes=changes, ddl=ddl)

    def _copying_rows(self, txn: Transaction) -> bool:
        shadows = {(e.schema, e.shadow) for e in self.entries.values() if e.state == COPYING}
        return bool(shadows) and any((c.schema, c.table) in shadows for c in txn.changes)

    def _stop(self, txn: Transaction, exc: UnexpectedChange) -> FatalError:
        entry = exc.entry
        error = FatalError(
            f"channel {self.channel} stopped at {txn.scn}: {exc}: {for_log(exc.statement)!r}. "
            f'This datacenter replays the tool\'s ALTER (online_schema_change = "replay") and '
            f"never created {entry.shadow}. Make {entry.schema}.{entry.table} (and any table "
            f"the statement makes) here match the tool's datacenter by hand (drc verify "
            f"compares them), forget the run by deleting its row of drc.{TABLE} (channel "
            f"{self.channel}, schema_name {entry.schema}, table_name {entry.table}), then go "
            "past the statement with drc channel skip"
        )
        error.stoppage = Stoppage.at(txn.scn, error, [txn])
        return error
