"""Schema history of every captured table, keyed by SCN (embedded SQLite)."""

from drc.core.errors import (
    MetaStoreCorruptError,
    MetaStoreError,
    MetaStoreUnavailableError,
    SchemaHistoryConflictError,
)
from drc.metastore.file import DEFAULT_FILENAME
from drc.metastore.history import HistoryEntry
from drc.metastore.store import MetaStore

__all__ = [
    "DEFAULT_FILENAME",
    "HistoryEntry",
    "MetaStore",
    "MetaStoreCorruptError",
    "MetaStoreError",
    "MetaStoreUnavailableError",
    "SchemaHistoryConflictError",
]
