"""MetaStore: the schema history of every captured table, keyed by SCN, in one SQLite file.

A row change is decoded with its table's schema *as of its SCN*, so the replicator records every
version a table goes through, and readers ask "what was db.t at SCN s?" (:meth:`schema_at`).

File format (``DIR/metastore.sqlite3`` beside the event buffer; format version 1)::

    meta(key TEXT PRIMARY KEY, value TEXT)      key 'format' = '1'
    history(
      id        INTEGER PRIMARY KEY   insertion order: orders entries that share an SCN
      db, tbl   TEXT                  tbl = '' holds schema-level DDL (CREATE DATABASE, ...)
      scn       BLOB(20)              SCN.to_bytes(): byte order is SCN order
      kind      'schema' | 'ddl' | 'drop'
      columns   TEXT                  kind 'schema': {"columns": [{name, type, nullable,
                                      charset}], "primary_key": [...]} as JSON
      statement TEXT                  kind 'ddl' and 'drop': the statement as the source ran it
    )
    index history_by_table (db, tbl, scn, id)

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

Durability: WAL journal, synchronous=FULL. NORMAL would be safe against a process crash but may
lose the last commits on power loss, which is only harmless if the replicator never resumes after
an SCN whose history was lost, i.e. if this file were always synced before the event buffer. FULL
drops that coupling for the price of one fsync per history write, and writes are rare (one per
DDL or newly seen table), so it costs nothing measurable.

Threads: one connection (``check_same_thread=False``) guarded by a lock, so one writer thread and
any number of reader threads (the HTTP API) can share a MetaStore; every call is a few indexed
row reads, so serialising them is cheaper than a connection per thread. Other processes (the
``drc schema`` CLI) open the file read-only; WAL lets them read while the replicator writes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from drc.core import ddl
from drc.core.errors import (
    MetaStoreCorruptError,
    MetaStoreError,
    MetaStoreUnavailableError,
    SchemaHistoryConflictError,
)
from drc.core.events import Column, SchemaChange, TableSchema
from drc.core.scn import SCN
from drc.core.statements import for_log

DEFAULT_FILENAME = "metastore.sqlite3"
FORMAT_VERSION = "1"
BUSY_TIMEOUT_S = 5.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS history (
        id INTEGER PRIMARY KEY,
        db TEXT NOT NULL,
        tbl TEXT NOT NULL,
        scn BLOB NOT NULL CHECK (length(scn) = 20),
        kind TEXT NOT NULL CHECK (kind IN ('schema', 'ddl', 'drop')),
        columns TEXT,
        statement TEXT)""",
    "CREATE INDEX IF NOT EXISTS history_by_table ON history (db, tbl, scn, id)",
)
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

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False) -> MetaStore:
        """Open (creating it unless ``read_only``) the metastore at ``path``.

        Raises MetaStoreError if the file is missing (read-only) or its directory is, and
        MetaStoreCorruptError if it is not a readable DRC metastore.
        """
        path = Path(path)
        if read_only and not path.is_file():
            raise MetaStoreError(
                f"no metastore at {path}; point at the replicator's buffer directory "
                f"(it holds {DEFAULT_FILENAME}) or at the file itself"
            )
        if not read_only and not path.parent.is_dir():
            raise MetaStoreError(f"cannot create metastore {path}: {path.parent} does not exist")
        target = f"{path.resolve().as_uri()}?mode=ro" if read_only else str(path)
        try:
            if not read_only:
                _make_private(path)
            conn = sqlite3.connect(
                target,
                uri=read_only,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,  # autocommit; writes use explicit BEGIN IMMEDIATE
                check_same_thread=False,
            )
        except (sqlite3.Error, OSError) as exc:
            raise MetaStoreError(f"cannot open metastore {path}: {exc}") from exc
        store = cls(conn, path)
        try:
            with store._translated("open"):
                store._prepare(conn, read_only)
        except BaseException:
            conn.close()
            raise
        return store

    @property
    def path(self) -> Path:
        return self._path

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

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
        with self._writing("record a schema") as conn:
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
        with self._writing("record DDL") as conn:
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
        with self._writing("copy history") as conn:
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
        with self._reading("read history") as conn:
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
        with self._reading("read a schema") as conn:
            return self._schema_at(conn, schema, table, scn)

    def version_at(self, schema: str, table: str, scn: SCN | None = None) -> HistoryEntry | None:
        """The 'schema' or 'drop' entry in force at ``scn`` (default: the newest), or None."""
        high = None if scn is None else _high(scn)
        with self._reading("read a schema") as conn:
            return self._version_at(conn, schema, table, high)

    def history(self, schema: str, table: str) -> list[HistoryEntry]:
        """Every entry of ``schema``.``table`` in SCN order (recording order at one SCN)."""
        with self._reading("read history") as conn:
            rows = conn.execute(
                "SELECT scn, kind, columns, statement FROM history"
                " WHERE db = ? AND tbl = ? ORDER BY scn, id",
                (schema, table),
            ).fetchall()
            return [self._entry(schema, table, row) for row in rows]

    def tables(self) -> list[tuple[str, str]]:
        """Every (schema, table) with history, dropped ones included, sorted."""
        with self._reading("list tables") as conn:
            return self._tables(conn)

    # -- internals ---------------------------------------------------------------------------

    def _prepare(self, conn: sqlite3.Connection, read_only: bool) -> None:
        if not read_only:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        check = conn.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise MetaStoreCorruptError(_corrupt(self._path, "; ".join(r[0] for r in check[:3])))
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not names and not read_only:
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('format', ?)", (FORMAT_VERSION,)
            )
            conn.execute("COMMIT")
        elif not {"meta", "history"} <= names:
            raise MetaStoreCorruptError(
                f"{self._path} is an SQLite file but not a DRC metastore "
                f"(tables: {', '.join(sorted(names)) or 'none'}); check the path"
            )
        row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        if row is None or row[0] != FORMAT_VERSION:
            found = "no format version" if row is None else f"format version {row[0]!r}"
            raise MetaStoreError(
                f"metastore {self._path} has {found}; this DRC reads format "
                f"{FORMAT_VERSION}: run the DRC version that wrote it"
            )

    @contextmanager
    def _translated(self, doing: str) -> Iterator[None]:
        """Turn sqlite3 errors into the DRC error tree, naming the file."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise MetaStoreUnavailableError(
                    f"cannot {doing}: metastore {self._path} stayed locked by another writer "
                    f"for {BUSY_TIMEOUT_S:g}s; is a second replicator using this directory?"
                ) from exc
            if "malformed" in text or "not a database" in text:
                raise MetaStoreCorruptError(_corrupt(self._path, text)) from exc
            raise MetaStoreError(
                f"cannot {doing} in metastore {self._path}: {text}; "
                "check the disk (space, permissions, read-only mount)"
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise MetaStoreCorruptError(_corrupt(self._path, str(exc))) from exc

    @contextmanager
    def _reading(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._lock, self._translated(doing):
            yield self._connection()

    @contextmanager
    def _writing(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back if the body raises."""
        with self._lock, self._translated(doing):
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MetaStoreError(f"metastore {self._path} is closed")
        return self._conn

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
            f"refusing to rewrite the history of {db}.{tbl} in {self._path}: it has entries up "
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
                _corrupt(self._path, f"bad history entry of {db}.{tbl}: {exc}")
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


def _corrupt(path: Path, detail: str) -> str:
    return (
        f"metastore {path} is unreadable ({detail}). It holds only schema history: stop the "
        "replicator, move the file aside for diagnosis and restore it from a backup or a "
        "follower's copy; a new empty metastore knows only schemas recorded from the "
        "replicator's resume point on"
    )


def _make_private(path: Path) -> None:
    """Create the file owner-only (it holds table schemas and DDL text). SQLite gives its WAL
    and shared-memory files the database file's permissions, so they follow."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
