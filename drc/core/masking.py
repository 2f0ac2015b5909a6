"""Column masking at capture: personal data that never leaves the datacenter.

``[replicator] mask_columns`` names, per table, columns whose values are replaced before a
transaction is stored in the buffer, so nothing this datacenter serves (pulls, streams,
segment files, its group's followers, every subscriber and remote apply channel) ever holds
the original; only the source database does:

- ``"null"``: the value becomes NULL;
- ``"hmac"``: the value becomes the lowercase hex HMAC-SHA256 of its bytes under the key of
  ``mask_key_file`` (a str's UTF-8, a bytes value as is, anything else its ``str()``): equal
  values give equal masks, so a subscriber can still join or count by the column, but
  without the key nobody can test a guess. NULL stays NULL.

A key column is never masked: the receiving side would not find its row (capture stops with
an error naming it). A datacenter that applies the table should leave the masked columns out
on its channel (``exclude_columns``), so it keeps its own values and detects conflicts on the
others.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any, Literal

from drc.core.errors import ConfigError
from drc.core.events import Row, RowChange, TableSchema, Transaction
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.tablefilter import TableFilter

Method = Literal["hmac", "null"]
METHODS: tuple[Method, ...] = ("hmac", "null")

Tables = Mapping[tuple[str, str], TableSchema]

_MAX_CACHED_TABLES = 65536


class MaskedKeyError(ConfigError):
    """mask_columns names a primary key column of a captured table."""


def hmac_hex(key: bytes, value: Any) -> str:
    """The ``"hmac"`` mask of a non-NULL value."""
    if isinstance(value, bytes | bytearray):
        data = bytes(value)
    else:
        data = (value if isinstance(value, str) else str(value)).encode()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


class Masker:
    """Replaces the masked columns of a transaction's row images (both of them)."""

    def __init__(self, columns: Mapping[str, Mapping[str, Method]], key: bytes | None) -> None:
        if key is None and any("hmac" in m.values() for m in columns.values()):
            raise ConfigError('mask_columns uses "hmac": set mask_key_file to the HMAC key\'s file')
        self._key = key or b""
        self._entries = [
            (TableFilter.build([pattern]), {c.lower(): m for c, m in methods.items()})
            for pattern, methods in columns.items()
        ]
        self._found: dict[tuple[str, str], dict[str, Method] | None] = {}
        self.masked = 0  # values replaced

    def __call__(self, txn: Transaction, tables: Tables) -> Transaction:
        """``txn`` with its masked columns replaced; ``tables``: the schemas of its tables
        (the assembler's), whose keys are never masked."""
        if not self._entries or not txn.changes:
            return txn
        changes = tuple([self._change(c, tables) for c in txn.changes])
        if all(a is b for a, b in zip(changes, txn.changes, strict=True)):
            return txn
        return dataclasses.replace(txn, changes=changes)

    def _methods(self, schema: str, table: str) -> dict[str, Method] | None:
        key = (schema, table)
        if key not in self._found:
            if len(self._found) >= _MAX_CACHED_TABLES:
                self._found.clear()
            self._found[key] = next((m for f, m in self._entries if f.matches(schema, table)), None)
        return self._found[key]

    def _change(
        self, change: RowChange, tables: Mapping[tuple[str, str], TableSchema]
    ) -> RowChange:
        methods = self._methods(change.schema, change.table)
        if not methods or change.schema == CHECKPOINT_SCHEMA:  # DRC's own rows: as they are
            return change
        schema = tables.get((change.schema, change.table))
        key = () if schema is None else schema.primary_key
        keyed = [k for k in key if k.lower() in methods]
        if keyed:
            raise MaskedKeyError(
                f"[replicator] mask_columns masks {', '.join(map(repr, keyed))} of "
                f"{change.schema}.{change.table}, a primary key column: a masked key would not "
                "find its row on the receiving side; remove it from mask_columns"
            )
        before = self._image(change.before, methods)
        after = self._image(change.after, methods)
        return RowChange(change.schema, change.table, change.op, before, after)

    def _image(self, row: Row | None, methods: Mapping[str, Method]) -> Row | None:
        if row is None:
            return None
        masked = {}
        for name, value in row.items():
            method = methods.get(name.lower())
            if method is not None and value is not None:
                value = None if method == "null" else hmac_hex(self._key, value)
                self.masked += 1
            masked[name] = value
        return masked
