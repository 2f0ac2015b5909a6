"""The metastore's SQLite file: its format, how it is opened and kept durable, its errors.

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

What the entries mean is :mod:`drc.metastore.history`'s.

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

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from drc.core.errors import MetaStoreCorruptError, MetaStoreError, MetaStoreUnavailableError

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


class MetaStoreFile:
    """One open metastore file: a lock-guarded connection, read or written one transaction at
    a time, its sqlite3 errors turned into DRC's; create with :meth:`open`."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path, *, read_only: bool) -> MetaStoreFile:
        """Open (creating it unless ``read_only``) the metastore at ``path``.

        Raises MetaStoreError if the file is missing (read-only) or its directory is, and
        MetaStoreCorruptError if it is not a readable DRC metastore.
        """
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
        file = cls(conn, path)
        try:
            with file._translated("open"):
                file._prepare(conn, read_only)
        except BaseException:
            conn.close()
            raise
        return file

    @property
    def path(self) -> Path:
        return self._path

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @contextmanager
    def reading(self, doing: str) -> Iterator[sqlite3.Connection]:
        """The connection, for reads; ``doing`` names the call in errors."""
        with self._lock, self._translated(doing):
            yield self._connection()

    @contextmanager
    def writing(self, doing: str) -> Iterator[sqlite3.Connection]:
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

    def _prepare(self, conn: sqlite3.Connection, read_only: bool) -> None:
        if not read_only:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        check = conn.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise MetaStoreCorruptError(
                corrupt_message(self._path, "; ".join(r[0] for r in check[:3]))
            )
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
                raise MetaStoreCorruptError(corrupt_message(self._path, text)) from exc
            raise MetaStoreError(
                f"cannot {doing} in metastore {self._path}: {text}; "
                "check the disk (space, permissions, read-only mount)"
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise MetaStoreCorruptError(corrupt_message(self._path, str(exc))) from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MetaStoreError(f"metastore {self._path} is closed")
        return self._conn


def corrupt_message(path: Path, detail: str) -> str:
    """The message of a MetaStoreCorruptError: what is lost and how to recover."""
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
