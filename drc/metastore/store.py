"""MetaStore: the schema history of every captured table, keyed by SCN, in one SQLite file.

A row change is decoded with its table's schema *as of its SCN*, so the replicator records every
version a table goes through, and readers ask "what was db.t at SCN s?" (:meth:`schema_at`).

The file, its format and durability are :mod:`drc.metastore.file`'s; what its entries mean, how
SCNs are compared and why history is append-only, :mod:`drc.metastore.history`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from drc.core.events import SchemaChange, TableSchema
from drc.core.scn import SCN
from drc.core.statements import for_log
from drc.metastore import ddl_steps
from drc.metastore.file import MetaStoreFile
from drc.metastore.history import HistoryEntry, HistoryRows, RawEntry


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
        with self._writing("record a schema") as rows:
            entry = rows.version_at(db, tbl, scn)
            if entry is not None and entry.schema == table:
                return False
            if any(e.schema == table for e in rows.entries_at(db, tbl, scn)):
                return False
            rows.refuse_rewrite(db, tbl, scn, f"schema {_describe(table)}")
            rows.insert(db, tbl, scn, "schema", table, None)
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
        no table it is kept as schema-level DDL under ``(change.schema, '')``. What each table
        gets is :mod:`drc.metastore.ddl_steps`'s (a DROP or the old name of a RENAME ends its
        version at ``scn``). Replaying a statement already recorded at ``scn`` changes nothing.
        """
        wanted = None if tables is None else set(tables)
        with self._writing("record DDL") as rows:
            steps = ddl_steps.plan(rows, scn, change, wanted)
            todo = [s for s in steps if not rows.has_statement(s.db, s.tbl, scn, change.statement)]
            for db, tbl in dict.fromkeys((s.db, s.tbl) for s in todo):
                rows.refuse_rewrite(db, tbl, scn, f"DDL {for_log(change.statement)!r}")
            ddl_steps.record(rows, scn, change, todo)

    def import_entries(self, entries: Sequence[RawEntry]) -> int:
        """Add another member's entries (from :meth:`entries_between`) exactly as they are,
        skipping any already held; returns how many were added. Followers copy the leader's
        history this way, so every member answers every schema question alike."""
        with self._writing("copy history") as rows:
            return sum(rows.add_raw(e) for e in entries)

    # -- reads -------------------------------------------------------------------------------

    def entries_between(self, after: SCN, upto: SCN) -> list[RawEntry]:
        """Every entry at an SCN in (``after``, ``upto``], as stored, in recording order."""
        with self._reading("read history") as rows:
            return rows.between(after, upto)

    def schema_at(self, schema: str, table: str, scn: SCN) -> TableSchema | None:
        """The schema in force at ``scn``: newest recorded at an SCN <= scn; None if unknown
        or dropped."""
        with self._reading("read a schema") as rows:
            return rows.schema_at(schema, table, scn)

    def version_at(self, schema: str, table: str, scn: SCN | None = None) -> HistoryEntry | None:
        """The 'schema' or 'drop' entry in force at ``scn`` (default: the newest), or None."""
        with self._reading("read a schema") as rows:
            return rows.version_at(schema, table, scn)

    def history(self, schema: str, table: str) -> list[HistoryEntry]:
        """Every entry of ``schema``.``table`` in SCN order (recording order at one SCN)."""
        with self._reading("read history") as rows:
            return rows.of_table(schema, table)

    def tables(self) -> list[tuple[str, str]]:
        """Every (schema, table) with history, dropped ones included, sorted."""
        with self._reading("list tables") as rows:
            return rows.tables()

    @contextmanager
    def _reading(self, doing: str) -> Iterator[HistoryRows]:
        with self._file.reading(doing) as conn:
            yield HistoryRows(conn, self.path)

    @contextmanager
    def _writing(self, doing: str) -> Iterator[HistoryRows]:
        """One write transaction; rolled back if the body raises."""
        with self._file.writing(doing) as conn:
            yield HistoryRows(conn, self.path)


def _describe(table: TableSchema) -> str:
    return f"({', '.join(f'{c.name} {c.type}' for c in table.columns)})"
