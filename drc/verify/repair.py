"""``drc verify --repair``: make confirmed differences equal, without echo, with a record.

Which side is written:

- by default the source is right: the target gets the source's row (upsert), or loses a row
  the source does not have (delete);
- a table whose policy decides by version (lww, drc.conflicts.policies): the newer row by the
  timestamp column wins, ties going to the datacenter listed first in ``[conflicts]
  priority``; when the target's row wins it is written to the source. A row on one side only
  is compared with the tombstone the other side keeps of its deletion
  (drc.conflicts.tombstones): a newer deletion wins and the row is deleted where it survived
  (its tombstone copied there); without a newer tombstone the row wins and is written where it
  is missing. The same decision is what the report shows.

Each repair is one transaction on the side written, in a session with ``skip_replication``
(and ``@drc_apply``, so no guarded trigger fires): the replicator of that datacenter flags it
as DRC-originated and no channel carries it anywhere. The row written over is locked first and
must still be the image verify confirmed; if it changed meanwhile, replication is moving it and
the repair is skipped (run verify again). Every repair is logged in the target's
``drc.verify_repairs`` with both rows as JSON. Keyless tables are not repaired (no key says
which of several equal rows to touch); their differences stay reported.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drc.conflicts import tombstones
from drc.conflicts.policies import POLICIES
from drc.conflicts.rules import Ranks, Version
from drc.conflicts.settings import ConflictsConfig
from drc.core.rowsum import EXTRA, MISSING
from drc.core.settle import Images
from drc.core.tablefilter import TableFilter
from drc.mysql import driver, sql
from drc.verify.compare import TableSpec
from drc.verify.sides import json_row, query

log = logging.getLogger(__name__)

LOG_TABLE = sql.table_name("drc", "verify_repairs")
CREATE_LOG = [
    "CREATE DATABASE IF NOT EXISTS `drc`",
    "CREATE TABLE IF NOT EXISTS `drc`.`verify_repairs` (\n"
    "  id BIGINT AUTO_INCREMENT PRIMARY KEY,\n"
    "  repaired_at DATETIME(6) NOT NULL,\n"
    "  channel VARCHAR(64) NOT NULL,\n"
    "  source_table VARCHAR(130) NOT NULL,\n"
    "  target_table VARCHAR(130) NOT NULL,\n"
    "  kind VARCHAR(16) NOT NULL,\n"
    "  action VARCHAR(32) NOT NULL,\n"
    "  row_key LONGTEXT NOT NULL,\n"
    "  source_row LONGTEXT NULL,\n"
    "  target_row LONGTEXT NULL,\n"
    "  KEY (repaired_at)\n"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
]


@dataclass(frozen=True, slots=True)
class Decision:
    """Which side gets which row: ``write_target`` True writes ``row`` (None: delete) on the
    target, False on the source."""

    write_target: bool
    row: tuple[Any, ...] | None

    @property
    def action(self) -> str:
        return ("target:" if self.write_target else "source:") + (
            "delete" if self.row is None else "upsert"
        )


def decide(
    spec: TableSpec,
    images: Images,
    conflicts: ConflictsConfig,
    local: str,
    origin: str,
    tombstone: Version | None = None,
) -> Decision:
    """The repair of one confirmed difference (see the module docstring); ``tombstone``: the
    deletion recorded on the side without the row, if any."""
    source_row, target_row = images
    column = version_column(conflicts, spec.target)
    if column is None:
        return Decision(True, source_row)
    at = spec.columns.index(column)
    ranks = Ranks(conflicts.priority)
    if source_row is None or target_row is None:
        on_target = target_row is not None
        row = target_row if on_target else source_row
        assert row is not None
        if tombstone is not None and ranks.newer(
            tombstone, Version(row[at], local if on_target else origin)
        ):
            return Decision(on_target, None)  # the deletion is newer: delete where it survived
        return Decision(not on_target, row)
    target_wins = ranks.newer(Version(target_row[at], local), Version(source_row[at], origin))
    return Decision(False, target_row) if target_wins else Decision(True, source_row)


def tombstone_of(
    conn: Any,
    table: tuple[str, str],
    key_columns: Sequence[str],
    key: Sequence[Any],
    floats: frozenset[str],
) -> Version | None:
    """The deletion of ``key`` recorded in ``table``'s companion on this server (None: none,
    or no companion table with that key); ``floats``: the table's FLOAT columns."""
    companion = sql.table_name(tombstones.SCHEMA, tombstones.name(*table))
    where = sql.by_keys(key_columns, [tuple(key)], floats)
    try:
        rows = query(conn, f"SELECT {sql.ident(tombstones.COL_DELETED_AT)}, "
                     f"{sql.ident(tombstones.COL_ORIGIN)} FROM {companion} WHERE {where.sql}",
                     where.params)  # fmt: skip
    except driver.ProgrammingError:  # no such companion (or another key): no tombstone
        return None
    return Version(rows[0][0], str(rows[0][1])) if rows else None


def decide_all(
    source: Any,
    target: Any,
    specs: Mapping[str, TableSpec],
    confirmed: Mapping[tuple[str, tuple[Any, ...]], tuple[str, Images]],
    conflicts: ConflictsConfig,
    local: str,
    origin: str,
) -> dict[tuple[str, tuple[Any, ...]], tuple[Decision, Version | None]]:
    """The decision for every repairable confirmed difference, with the tombstone it rests on
    (read from the side without the row, for lww tables)."""
    found = {}
    for (table, key), (kind, images) in confirmed.items():
        spec = specs[table]
        if not repairable(spec, kind):
            continue
        tombstone = None
        if version_column(conflicts, spec.target) is not None and None in images:
            on_source = images[0] is None
            tombstone = tombstone_of(source if on_source else target,
                                     spec.source if on_source else spec.target, spec.key,
                                     key, spec.floats)  # fmt: skip
        decision = decide(spec, images, conflicts, local, origin, tombstone)
        found[(table, key)] = (decision, tombstone)
    return found


def version_column(conflicts: ConflictsConfig, target: tuple[str, str]) -> str | None:
    """The timestamp column of the target table, None unless its policy decides by version."""
    for entry in conflicts.tables:
        if TableFilter.build([entry.table]).matches(*target):
            return entry.column if POLICIES[entry.policy].by_version else None
    return None


def ensure_log(target: Any) -> None:
    with target.cursor() as cur:
        for statement in CREATE_LOG:
            cur.execute(statement)


def repair_one(
    source: Any,
    target: Any,
    spec: TableSpec,
    key: tuple[Any, ...],
    kind: str,
    images: Images,
    decision: Decision,
    channel: str,
    tombstone: Version | None = None,
) -> bool:
    """Apply ``decision`` and log it; False when the row written over changed meanwhile. A
    deletion that won by ``tombstone`` copies it to the side the row is deleted on."""
    conn = target if decision.write_target else source
    table = spec.target if decision.write_target else spec.source
    expected = images[1] if decision.write_target else images[0]
    conn.begin()
    try:
        where = sql.by_keys(spec.key, [key], spec.floats)
        columns = sql.read_columns(spec.columns, spec.floats)
        now = query(conn, f"SELECT {columns} FROM {sql.table_name(*table)} WHERE {where.sql} "
                    "FOR UPDATE", where.params)  # fmt: skip
        if (tuple(now[0]) if now else None) != expected:
            conn.rollback()
            log.info("repair of %s %s skipped: the row changed since it was compared", spec.name,
                     key)  # fmt: skip
            return False
        statement = (
            sql.delete(*table, where)
            if decision.row is None
            else sql.upsert(*table, spec.columns, [decision.row])
        )
        with conn.cursor() as cur:
            cur.execute(statement.sql, statement.params)
        if decision.row is None and tombstone is not None:
            _copy_tombstone(conn, table, spec.key, key, tombstone)
        if conn is target:
            _log(target, spec, key, kind, images, decision, channel)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    if conn is not target:
        _log(target, spec, key, kind, images, decision, channel)
    return True


def _copy_tombstone(
    conn: Any, table: tuple[str, str], key_columns: Sequence[str], key: Sequence[Any],
    tombstone: Version,
) -> None:  # fmt: skip
    recorded = (tuple(key), tombstone.stamp, tombstone.datacenter)
    statement = tombstones.upsert(*table, key_columns, [recorded])
    try:
        with conn.cursor() as cur:
            cur.execute(statement.sql, statement.params)
    except driver.ProgrammingError as exc:  # no companion table on this side
        log.info("tombstone of %s %s not copied: %s", ".".join(table), key, exc)


def _log(
    target: Any,
    spec: TableSpec,
    key: Sequence[Any],
    kind: str,
    images: Images,
    decision: Decision,
    channel: str,
) -> None:
    names = spec.columns
    with target.cursor() as cur:
        cur.execute(
            f"INSERT INTO {LOG_TABLE} (repaired_at, channel, source_table, target_table, kind, "
            "action, row_key, source_row, target_row) VALUES (UTC_TIMESTAMP(6), %s, %s, %s, %s, "
            "%s, %s, %s, %s)",
            (channel, ".".join(spec.source), ".".join(spec.target), kind, decision.action,
             json_row(spec.key, key), json_row(names, images[0]), json_row(names, images[1])),
        )  # fmt: skip


def repairable(spec: TableSpec, kind: str) -> bool:
    return bool(spec.key) and kind in (MISSING, EXTRA, "different")


def repair_all(
    source: Any,
    target: Any,
    specs: Mapping[str, TableSpec],
    confirmed: Mapping[tuple[str, tuple[Any, ...]], tuple[str, Images]],
    decisions: Mapping[tuple[str, tuple[Any, ...]], tuple[Decision, Version | None]],
    channel: str,
) -> dict[str, int]:
    """Every confirmed difference with a decision (:func:`decide_all`) repaired; repairs
    done per table."""
    ensure_log(target)
    done: dict[str, int] = {}
    for (table, key), (decision, tombstone) in decisions.items():
        kind, images = confirmed[(table, key)]
        if repair_one(source, target, specs[table], key, kind, images, decision, channel,
                      tombstone):  # fmt: skip
            done[table] = done.get(table, 0) + 1
    return done
