"""TableSchema from a TABLE_MAP event written with binlog_row_metadata=FULL.

Column names, charsets, ENUM/SET members and the primary key come from the event's optional
metadata, so each event carries the schema it was written under, with no information_schema
query that could return a newer schema after an ALTER.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from drc.core.errors import SourceConfigError
from drc.core.events import Column, TableSchema

_NAMES = {
    FIELD_TYPE.TINY: "tinyint",
    FIELD_TYPE.SHORT: "smallint",
    FIELD_TYPE.INT24: "mediumint",
    FIELD_TYPE.LONG: "int",
    FIELD_TYPE.LONGLONG: "bigint",
    FIELD_TYPE.FLOAT: "float",
    FIELD_TYPE.DOUBLE: "double",
    FIELD_TYPE.YEAR: "year",
    FIELD_TYPE.DATE: "date",
    FIELD_TYPE.TIME: "time",
    FIELD_TYPE.TIME2: "time",
    FIELD_TYPE.DATETIME: "datetime",
    FIELD_TYPE.DATETIME2: "datetime",
    FIELD_TYPE.TIMESTAMP: "timestamp",
    FIELD_TYPE.TIMESTAMP2: "timestamp",
    FIELD_TYPE.BLOB: "blob",
    FIELD_TYPE.GEOMETRY: "geometry",
    FIELD_TYPE.JSON: "json",
    FIELD_TYPE.BIT: "bit",
    FIELD_TYPE.ENUM: "enum",
    FIELD_TYPE.SET: "set",
}
_INTEGERS = {
    FIELD_TYPE.TINY,
    FIELD_TYPE.SHORT,
    FIELD_TYPE.INT24,
    FIELD_TYPE.LONG,
    FIELD_TYPE.LONGLONG,
}


def column_type_text(column: Any) -> str:
    """A readable type: 'bigint unsigned', 'decimal(65,30)', 'varchar(80 bytes)', 'datetime(6)'."""
    kind = column.type
    if kind in _INTEGERS:
        return _NAMES[kind] + (" unsigned" if column.unsigned else "")
    if kind == FIELD_TYPE.NEWDECIMAL:
        return f"decimal({column.precision},{column.decimals})"
    if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
        return f"{_text_or_binary(column, 'varchar', 'varbinary')}({column.max_length} bytes)"
    if kind == FIELD_TYPE.STRING:
        return f"{_text_or_binary(column, 'char', 'binary')}({column.max_length} bytes)"
    if kind == FIELD_TYPE.BLOB:
        return _text_or_binary(column, "text", "blob")
    if kind in (FIELD_TYPE.TIME2, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2) and column.fsp:
        return f"{_NAMES[kind]}({column.fsp})"
    if kind == FIELD_TYPE.BIT:
        return f"bit({column.bits})"
    if kind in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        members = column.enum_values if kind == FIELD_TYPE.ENUM else column.set_values
        return f"{_NAMES[kind]}({','.join(repr(m) for m in members or ())})"
    return _NAMES.get(kind, f"type{kind}")


def _text_or_binary(column: Any, text: str, binary: str) -> str:
    return binary if column.character_set_name in (None, "binary") else text


def table_schema_from_map(event: Any) -> TableSchema:
    names = [column.name for column in event.columns]
    if any(not name for name in names):
        raise SourceConfigError(
            f"TABLE_MAP of {event.schema}.{event.table} carries no column names: the row was "
            "written with binlog_row_metadata=MINIMAL; set it to FULL on the source"
        )
    nullable = event.null_bitmask
    columns = tuple(
        Column(
            name=column.name,
            type=column_type_text(column),
            nullable=bool(nullable[i // 8] & (1 << (i % 8))),
            charset=None if column.character_set_name == "binary" else column.character_set_name,
        )
        for i, column in enumerate(event.columns)
    )
    key = tuple(names[i] for i in event.optional_metadata.simple_primary_key_list)
    if not key and event.optional_metadata.primary_keys_with_prefix:
        key = tuple(names[i] for i in event.optional_metadata.primary_keys_with_prefix)
    return TableSchema(event.schema, event.table, columns, key)
