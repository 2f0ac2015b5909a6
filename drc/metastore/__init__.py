"""Schema history of every captured table, keyed by SCN (embedded SQLite)."""

from drc.metastore.store import (
    DEFAULT_FILENAME,
    HistoryEntry,
    MetaStore,
    MetaStoreCorruptError,
    MetaStoreError,
    MetaStoreUnavailableError,
    SchemaHistoryConflictError,
)

__all__ = [
    "DEFAULT_FILENAME",
    "HistoryEntry",
    "MetaStore",
    "MetaStoreCorruptError",
    "MetaStoreError",
    "MetaStoreUnavailableError",
    "SchemaHistoryConflictError",
]
