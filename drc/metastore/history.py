"""The history table: its entries, and the queries and the append-only rule over them.

The version in force at SCN s is the newest 'schema' or 'drop' entry at an SCN <= s (later id
wins at equal SCN); a 'drop' means "no such table" (None). 'ddl' entries are the record of what
ran; they never change the version in force, so the replicator records the new schema (with
:meth:`~drc.metastore.store.MetaStore.record_schema`) at the DDL's own SCN.

SCN comparison ignores the server_id, which occupies the last 4 bytes of the encoding; queries
therefore compare against ``prefix + 00000000`` / ``prefix + ffffffff`` bounds, so an SCN given
with another server_id (typed by an operator, say) still finds the same point.

History is append-only. Recording again what is already there (a restarted replicator replaying
events from its resume point) changes nothing; recording something different at an SCN older
than the newest entry of a table raises :class:`SchemaHistoryConflictError` instead of rewriting.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from drc.core.errors import MetaStoreCorruptError, SchemaHistoryConflictError
from drc.core.events import Column, TableSchema
from drc.core.scn import SCN
from drc.metastore.file import corrupt_message

_LOW, _HIGH = b"\x00" * 4, b"\xff" * 4  # server_id bytes: compared SCN fields come first
_AFTER_ALL = b"\xff" * 20

Kind = Literal["schema", "ddl", "drop"]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One entry of a table's history: a schema version, a DDL statement, or a drop."""

    scn: SCN
    kind: Kind
    schema: TableSchema | None
    statement: str | None


@dataclass(frozen=True, slots=True)
class RawEntry:
    """One stored history row, for copying between group members (columns as stored JSON)."""

    db: str
    tbl: str
    scn: SCN
    kind: str
    columns: str | None
    statement: str | None


class HistoryRows:
    """The history table as one open connection of the file at ``path`` sees it, inside one
    read or write of the MetaStore (which holds the file's lock meanwhile)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path

    def tables(self) -> list[tuple[str, str]]:
        """Every (db, tbl) with history, dropped ones included, sorted."""
        rows = self._conn.execute(
            "SELECT DISTINCT db, tbl FROM history WHERE tbl != '' ORDER BY db, tbl"
        ).fetchall()
        return [(db, tbl) for db, tbl in rows]

    def schema_at(self, db: str, tbl: str, scn: SCN) -> TableSchema | None:
        entry = self.version_at(db, tbl, scn)
        return None if entry is None else entry.schema

    def version_at(self, db: str, tbl: str, scn: SCN | None) -> HistoryEntry | None:
        """The 'schema' or 'drop' entry in force at ``scn`` (None: the newest), or None."""
        row = self._conn.execute(
            "SELECT scn, kind, columns, statement FROM history"
            " WHERE db = ? AND tbl = ? AND kind IN ('schema', 'drop') AND scn <= ?"
            " ORDER BY scn DESC, id DESC LIMIT 1",
            (db, tbl, _AFTER_ALL if scn is None else _high(scn)),
        ).fetchone()
        return None if row is None else self._entry(db, tbl, row)

    def entries_at(self, db: str, tbl: str, scn: SCN) -> list[HistoryEntry]:
        rows = self._conn.execute(
            "SELECT scn, kind, columns, statement FROM history"
            " WHERE db = ? AND tbl = ? AND scn BETWEEN ? AND ? ORDER BY scn, id",
            (db, tbl, _low(scn), _high(scn)),
        ).fetchall()
        return [self._entry(db, tbl, row) for row in rows]

    def has_statement(self, db: str, tbl: str, scn: SCN, statement: str) -> bool:
        """Whether ``statement`` is already recorded for db.tbl at ``scn`` (a replay)."""
        return any(
            e.kind != "schema" and e.statement == statement for e in self.entries_at(db, tbl, scn)
        )

    def of_table(self, db: str, tbl: str) -> list[HistoryEntry]:
        """Every entry of db.tbl in SCN order (recording order at one SCN)."""
        rows = self._conn.execute(
            "SELECT scn, kind, columns, statement FROM history"
            " WHERE db = ? AND tbl = ? ORDER BY scn, id",
            (db, tbl),
        ).fetchall()
        return [self._entry(db, tbl, row) for row in rows]

    def between(self, after: SCN, upto: SCN) -> list[RawEntry]:
        """Every entry at an SCN in (``after``, ``upto``], as stored, in recording order."""
        rows = self._conn.execute(
            "SELECT db, tbl, scn, kind, columns, statement FROM history"
            " WHERE scn > ? AND scn <= ? ORDER BY id",
            (_high(after), _high(upto)),
        ).fetchall()
        return [
            RawEntry(db, tbl, SCN.from_bytes(scn), kind, c, st)
            for db, tbl, scn, kind, c, st in rows
        ]

    def refuse_rewrite(self, db: str, tbl: str, scn: SCN, what: str) -> None:
        """Raise SchemaHistoryConflictError if db.tbl has entries after ``scn`` (the caller
        found ``what`` differs from what is recorded at ``scn``)."""
        row = self._conn.execute(
            "SELECT scn FROM history WHERE db = ? AND tbl = ? ORDER BY scn DESC, id DESC LIMIT 1",
            (db, tbl),
        ).fetchone()
        if row is None or bytes(row[0])[:16] <= scn.to_bytes()[:16]:
            return
        newest = SCN.from_bytes(row[0])
        raise SchemaHistoryConflictError(
            f"refusing to rewrite the history of {db}.{tbl} in {self._path}: it has entries up "
            f"to SCN {newest}, and {what} at the older SCN {scn} differs from what is recorded "
            "there. The source's history is not the one recorded (another source, a restored "
            "backup, or a replicator resumed from a wrong SCN); check the replicator's source "
            "and resume point. To start over, move this file aside and restart the replicator."
        )

    def insert(
        self,
        db: str,
        tbl: str,
        scn: SCN,
        kind: Kind,
        table: TableSchema | None,
        statement: str | None,
    ) -> None:
        self._conn.execute(
            "INSERT INTO history (db, tbl, scn, kind, columns, statement) VALUES (?,?,?,?,?,?)",
            (db, tbl, scn.to_bytes(), kind, None if table is None else _encode(table), statement),
        )

    def add_raw(self, e: RawEntry) -> bool:
        """Insert another member's entry as it is, unless one just like it is held."""
        row = (e.db, e.tbl, e.scn.to_bytes(), e.kind, e.columns, e.statement)
        found = self._conn.execute(
            "SELECT 1 FROM history WHERE db = ? AND tbl = ? AND scn = ? AND kind = ?"
            " AND columns IS ? AND statement IS ?",
            row,
        ).fetchone()
        if found is not None:
            return False
        self._conn.execute(
            "INSERT INTO history (db, tbl, scn, kind, columns, statement) VALUES (?,?,?,?,?,?)",
            row,
        )
        return True

    def _entry(
        self, db: str, tbl: str, row: tuple[bytes, str, str | None, str | None]
    ) -> HistoryEntry:
        raw_scn, kind, columns, statement = row
        try:
            scn = SCN.from_bytes(raw_scn)
            if kind not in ("schema", "ddl", "drop"):
                raise ValueError(f"unknown entry kind {kind!r}")
            table = _decode(db, tbl, columns) if kind == "schema" else None
        except (ValueError, TypeError, KeyError) as exc:
            raise MetaStoreCorruptError(
                corrupt_message(self._path, f"bad history entry of {db}.{tbl}: {exc}")
            ) from exc
        return HistoryEntry(scn, kind, table, statement)  # type: ignore[arg-type]


def _low(scn: SCN) -> bytes:
    return scn.to_bytes()[:16] + _LOW


def _high(scn: SCN) -> bytes:
    return scn.to_bytes()[:16] + _HIGH


def _encode(table: TableSchema) -> str:
    columns = [
        {"name": c.name, "type": c.type, "nullable": c.nullable, "charset": c.charset}
        for c in table.columns
    ]
    document = {"columns": columns, "primary_key": list(table.primary_key)}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def _decode(db: str, tbl: str, text: str | None) -> TableSchema:
    if text is None:
        raise ValueError("schema entry without columns")
    document = json.loads(text)
    columns = tuple(
        Column(c["name"], c["type"], bool(c["nullable"]), c["charset"]) for c in document["columns"]
    )
    return TableSchema(db, tbl, columns, tuple(document["primary_key"]))
