"""MetaStore: the schema history of every captured table, keyed by SCN, in one SQLite file.

A row change is decoded with its table's schema *as of its SCN*, so the replicator records every
version a table goes through, and readers ask "what was db.t at SCN s?" (:meth:`schema_at`).

The file, its format and durability are :mod:`drc.metastore.file`'s.

The version in force at SCN s is the newest 'schema' or 'drop' entry at an SCN <= s (later id
wins at equal SCN); a 'drop' means "no such table" (None). 'ddl' entries are the record of what
ran; they never change the version in force, so the replicator records the new schema (with
:meth:`record_schema`) at the DDL's own SCN.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from drc.core import ddl
from drc.core.errors import MetaStoreCorruptError, SchemaHistoryConflictError
from drc.core.events import Column, SchemaChange, TableSchema
from drc.core.scn import SCN
from drc.core.statements import for_log
from drc.metastore.file import MetaStoreFile, corrupt_message

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


class MetaStore:
    """Schema history by SCN in one SQLite file; create with :meth:`open`."""

    def __init__(self, file: MetaStoreFile) -> None:
        self._file = file

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False) -> MetaStore:
        """Open (creating it unless ``read_only``) the metastore at ``path``.

        Raises MetaStoreError if the file is missing (read-only) or its directory is, and
        MetaStoreCorruptError if it is not a readable DRC metastore.
        """
        return cls(MetaStoreFile.open(Path(path), read_only=read_only))

    @property
    def path(self) -> Path:
        return self._file.path

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> MetaStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writes ------------------------------------------------------------------------------

    def record_schema(self, scn: SCN, table: TableSchema) -> bool:
        """Record that from ``scn`` on, ``table.schema``.``table.table`` has this schema.

        Returns False (and records nothing) when that is already so: the version in force at
        ``scn`` is identical, or this exact version was recorded at ``scn`` (a replay). Raises
        SchemaHistoryConflictError for a different schema at an SCN older than the table's
        newest entry.
        """
        if not table.table:
            raise ValueError(f"table name of {table.schema!r} is empty; '' is reserved for DDL")
        db, tbl = table.schema, table.table
        with self._file.writing("record a schema") as conn:
            entry = self._version_at(conn, db, tbl, _high(scn))
            if entry is not None and entry.schema == table:
                return False
            if any(e.schema == table for e in self._entries_at(conn, db, tbl, scn)):
                return False
            self._refuse_rewrite(conn, db, tbl, scn, f"schema {_describe(table)}")
            self._insert(conn, db, tbl, scn, "schema", table, None)
            return True

    def record_ddl(
        self,
        scn: SCN,
        change: SchemaChange,
        tables: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        """Record a DDL statement at its SCN, attached to the tables it concerns.

        ``tables`` are the (schema, table) pairs to attach it to (the captured ones); None
        means every table :func:`~drc.core.ddl.ddl_tables` finds in the statement. With
        no table it is kept as schema-level DDL under ``(change.schema, '')``. A DROP TABLE (or
        the old name of a RENAME) ends the table's version at ``scn``; the new name of a plain
        RENAME gets the old columns; DROP DATABASE ends every known table of that database.
        Replaying a statement already recorded at ``scn`` changes nothing.
        """
        wanted = None if tables is None else set(tables)
        with self._file.writing("record DDL") as conn:
            steps = self._ddl_steps(conn, scn, change, wanted)
            todo = [s for s in steps if not self._has_statement(conn, s[0], s[1], scn, change)]
            for db, tbl in dict.fromkeys(step[:2] for step in todo):
                self._refuse_rewrite(conn, db, tbl, scn, f"DDL {for_log(change.statement)!r}")
            self._apply_ddl(conn, scn, change, todo)

    def _ddl_steps(
        self,
        conn: sqlite3.Connection,
        scn: SCN,
        change: SchemaChange,
        wanted: set[tuple[str, str]] | None,
    ) -> list[tuple[str, str, str, TableSchema | None]]:
        """(db, tbl, kind, moved schema) to record, in statement order.

        For a rename the old table's schema rides along to its new name, taken as the earlier
        steps of this same statement leave it (RENAME a TO tmp, b TO a, tmp TO b swaps).
        """
        parsed = ddl.ddl_tables(change)
        state: dict[tuple[str, str], TableSchema | None] = {}  # as earlier steps leave it
        steps: list[tuple[str, str, str, TableSchema | None]] = []
        carried: TableSchema | None = None
        for db, tbl, kind in parsed:
            schema = None
            if kind == ddl.RENAME_FROM:
                known = (db, tbl) in state
                carried = state[db, tbl] if known else self._schema_at(conn, db, tbl, scn)
            elif kind == ddl.RENAME_TO:
                schema = _renamed(carried, db, tbl)
            if kind in (ddl.DROP, ddl.RENAME_FROM, ddl.RENAME_TO):
                state[db, tbl] = schema
            steps.append((db, tbl, kind, schema))
        if wanted is not None:
            steps = [s for s in steps if s[:2] in wanted]
            named = {(db, tbl) for db, tbl, _ in parsed}
            steps += [(db, tbl, "ddl", None) for db, tbl in sorted(wanted - named)]
        dropped_db = ddl.dropped_database(change)
        if dropped_db is not None:
            for db, tbl in self._tables(conn):
                if db == dropped_db and self._schema_at(conn, db, tbl, scn) is not None:
                    steps.append((db, tbl, ddl.DROP, None))
        steps = [s for s in steps if s[1]] or [(change.schema, "", "ddl", None)]
        return steps

    def _apply_ddl(
        self,
        conn: sqlite3.Connection,
        scn: SCN,
        change: SchemaChange,
        steps: list[tuple[str, str, str, TableSchema | None]],
    ) -> None:
        for db, tbl, kind, carried in steps:
            ends = kind in (ddl.DROP, ddl.RENAME_FROM)
            self._insert(conn, db, tbl, scn, "drop" if ends else "ddl", None, change.statement)
            if kind == ddl.RENAME_TO and carried is not None:
                self._insert(conn, db, tbl, scn, "schema", carried, None)

    def import_entries(self, entries: Sequence[RawEntry]) -> int:
        """Add another member's entries (from :meth:`entries_between`) exactly as they are,
        skipping any already held; returns how many were added. Followers copy the leader's
        history this way, so every member answers every schema question alike."""
        added = 0
        with self._file.writing("copy history") as conn:
            for e in entries:
                found = conn.execute(
                    "SELECT 1 FROM history WHERE db = ? AND tbl = ? AND scn = ? AND kind = ?"
                    " AND columns IS ? AND statement IS ?",
                    (e.db, e.tbl, e.scn.to_bytes(), e.kind, e.columns, e.statement),
                ).fetchone()
                if found is None:
                    conn.execute(
                        "INSERT INTO history (db, tbl, scn, kind, columns, statement)"
                        " VALUES (?,?,?,?,?,?)",
                        (e.db, e.tbl, e.scn.to_bytes(), e.kind, e.columns, e.statement),
                    )
                    added += 1
        return added

    # -- reads -------------------------------------------------------------------------------

    def entries_between(self, after: SCN, upto: SCN) -> list[RawEntry]:
        """Every entry at an SCN in (``after``, ``upto``], as stored, in recording order."""
        with self._file.reading("read history") as conn:
            rows = conn.execute(
                "SELECT db, tbl, scn, kind, columns, statement FROM history"
                " WHERE scn > ? AND scn <= ? ORDER BY id",
                (_high(after), _high(upto)),
            ).fetchall()
        return [
            RawEntry(db, tbl, SCN.from_bytes(scn), kind, c, st)
            for db, tbl, scn, kind, c, st in rows
        ]

    def schema_at(self, schema: str, table: str, scn: SCN) -> TableSchema | None:
        """The schema in force at ``scn``: newest recorded at an SCN <= scn; None if unknown
        or dropped."""
        with self._file.reading("read a schema") as conn:
            return self._schema_at(conn, schema, table, scn)

    def version_at(self, schema: str, table: str, scn: SCN | None = None) -> HistoryEntry | None:
        """The 'schema' or 'drop' entry in force at ``scn`` (default: the newest), or None."""
        high = None if scn is None else _high(scn)
        with self._file.reading("read a schema") as conn:
            return self._version_at(conn, schema, table, high)

    def history(self, schema: str, table: str) -> list[HistoryEntry]:
        """Every entry of ``schema``.``table`` in SCN order (recording order at one SCN)."""
        with self._file.reading("read history") as conn:
            rows = conn.execute(
                "SELECT scn, kind, columns, statement FROM history"
                " WHERE db = ? AND tbl = ? ORDER BY scn, id",
                (schema, table),
            ).fetchall()
            return [self._entry(schema, table, row) for row in rows]

    def tables(self) -> list[tuple[str, str]]:
        """Every (schema, table) with history, dropped ones included, sorted."""
        with self._file.reading("list tables") as conn:
            return self._tables(conn)

    # -- internals ---------------------------------------------------------------------------

    def _tables(self, conn: sqlite3.Connection) -> list[tuple[str, str]]:
        rows = conn.execute(
            "SELECT DISTINCT db, tbl FROM history WHERE tbl != '' ORDER BY db, tbl"
        ).fetchall()
        return [(db, tbl) for db, tbl in rows]

    def _schema_at(
        self, conn: sqlite3.Connection, db: str, tbl: str, scn: SCN
    ) -> TableSchema | None:
        entry = self._version_at(conn, db, tbl, _high(scn))
        return None if entry is None else entry.schema

    def _version_at(
        self, conn: sqlite3.Connection, db: str, tbl: str, high: bytes | None
    ) -> HistoryEntry | None:
        row = conn.execute(
            "SELECT scn, kind, columns, statement FROM history"
            " WHERE db = ? AND tbl = ? AND kind IN ('schema', 'drop') AND scn <= ?"
            " ORDER BY scn DESC, id DESC LIMIT 1",
            (db, tbl, _AFTER_ALL if high is None else high),
        ).fetchone()
        return None if row is None else self._entry(db, tbl, row)

    def _entries_at(
        self, conn: sqlite3.Connection, db: str, tbl: str, scn: SCN
    ) -> list[HistoryEntry]:
        rows = conn.execute(
            "SELECT scn, kind, columns, statement FROM history"
            " WHERE db = ? AND tbl = ? AND scn BETWEEN ? AND ? ORDER BY scn, id",
            (db, tbl, _low(scn), _high(scn)),
        ).fetchall()
        return [self._entry(db, tbl, row) for row in rows]

    def _has_statement(
        self, conn: sqlite3.Connection, db: str, tbl: str, scn: SCN, change: SchemaChange
    ) -> bool:
        return any(
            e.kind != "schema" and e.statement == change.statement
            for e in self._entries_at(conn, db, tbl, scn)
        )

    def _refuse_rewrite(
        self, conn: sqlite3.Connection, db: str, tbl: str, scn: SCN, what: str
    ) -> None:
        row = conn.execute(
            "SELECT scn FROM history WHERE db = ? AND tbl = ? ORDER BY scn DESC, id DESC LIMIT 1",
            (db, tbl),
        ).fetchone()
        if row is None or bytes(row[0])[:16] <= scn.to_bytes()[:16]:
            return
        newest = SCN.from_bytes(row[0])
        raise SchemaHistoryConflictError(
            f"refusing to rewrite the history of {db}.{tbl} in {self.path}: it has entries up "
            f"to SCN {newest}, and {what} at the older SCN {scn} differs from what is recorded "
            "there. The source's history is not the one recorded (another source, a restored "
            "backup, or a replicator resumed from a wrong SCN); check the replicator's source "
            "and resume point. To start over, move this file aside and restart the replicator."
        )

    def _insert(
        self,
        conn: sqlite3.Connection,
        db: str,
        tbl: str,
        scn: SCN,
        kind: Kind,
        table: TableSchema | None,
        statement: str | None,
    ) -> None:
        conn.execute(
            "INSERT INTO history (db, tbl, scn, kind, columns, statement) VALUES (?,?,?,?,?,?)",
            (db, tbl, scn.to_bytes(), kind, None if table is None else _encode(table), statement),
        )

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
                corrupt_message(self._file.path, f"bad history entry of {db}.{tbl}: {exc}")
            ) from exc
        return HistoryEntry(scn, kind, table, statement)  # type: ignore[arg-type]


def _low(scn: SCN) -> bytes:
    return scn.to_bytes()[:16] + _LOW


def _high(scn: SCN) -> bytes:
    return scn.to_bytes()[:16] + _HIGH


def _renamed(table: TableSchema | None, db: str, tbl: str) -> TableSchema | None:
    if table is None:
        return None
    return TableSchema(db, tbl, table.columns, table.primary_key)


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


def _describe(table: TableSchema) -> str:
    return f"({', '.join(f'{c.name} {c.type}' for c in table.columns)})"
