"""``drc schema history|show DB.TABLE``: read the replicator's schema history (read-only)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from drc.cli.options import Parsed, format_option, stacked
from drc.core.ddl import parse_table_name
from drc.core.errors import DrcError
from drc.core.events import TableSchema
from drc.core.scn import SCN
from drc.metastore.file import DEFAULT_FILENAME
from drc.metastore.history import HistoryEntry
from drc.metastore.store import MetaStore

TABLE_NAME = Parsed("DB.TABLE", parse_table_name)

# --dir / --metastore / --format, shared by every command here.
_store_options = stacked(
    click.option(
        "--dir",
        "directory",
        type=click.Path(file_okay=False, path_type=Path),
        help=f"The replicator's buffer directory (holds {DEFAULT_FILENAME}).",
    ),
    click.option(
        "--metastore",
        "metastore",
        type=click.Path(dir_okay=False, path_type=Path),
        help="The metastore file itself, instead of --dir.",
    ),
    format_option("text", "Readable blocks, or one JSON document."),
)


@contextmanager
def _reading(directory: Path | None, metastore: Path | None) -> Iterator[MetaStore]:
    """The metastore opened read-only; DRC errors become a one-line click error (exit 1)."""
    if (directory is None) == (metastore is None):
        raise click.UsageError("give exactly one of --dir DIR or --metastore FILE")
    path = metastore if metastore is not None else Path(str(directory)) / DEFAULT_FILENAME
    try:
        with MetaStore.open(path, read_only=True) as store:
            yield store
    except DrcError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group()
def schema() -> None:
    """Schema history of captured tables, by SCN, from the replicator's metastore.

    A row change is decoded with its table's schema as of its SCN; these commands show which
    schema that was, and which DDL changed it. They only read the metastore, so they are safe
    to run beside a live replicator.
    """


@schema.command()
@click.argument("table", type=TABLE_NAME, metavar="DB.TABLE")
@_store_options
def history(
    table: tuple[str, str], directory: Path | None, metastore: Path | None, fmt: str
) -> None:
    """Every version, DDL statement and drop of DB.TABLE, oldest first.

    Each block shows the SCN, the kind of entry (schema, ddl or drop), the statement if any,
    and for a schema version its columns (name, type, nullability, charset, primary key).
    """
    db, tbl = table
    with _reading(directory, metastore) as store:
        entries = store.history(db, tbl)
        if not entries:
            raise click.ClickException(f"no history for {db}.{tbl}{_known_hint(store)}")
    if fmt == "json":
        document = {"schema": db, "table": tbl, "history": [_entry_json(e) for e in entries]}
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
        return
    click.echo(f"{db}.{tbl}: {len(entries)} entries")
    for entry in entries:
        click.echo("")
        click.echo(_entry_text(entry))


@schema.command()
@click.argument("table", type=TABLE_NAME, metavar="DB.TABLE")
@_store_options
@click.option(
    "--scn",
    type=Parsed("SCN", SCN.parse),
    default=None,
    help="Show the schema in force at this SCN (change_id:server_id:log_index:log_pos); "
    "default: the newest.",
)
def show(
    table: tuple[str, str],
    directory: Path | None,
    metastore: Path | None,
    fmt: str,
    scn: SCN | None,
) -> None:
    """The schema of DB.TABLE in force at an SCN (default: the newest).

    Exits 1 if the table was dropped at that SCN or has no version recorded at or before it.
    """
    db, tbl = table
    with _reading(directory, metastore) as store:
        entry = store.version_at(db, tbl, scn)
    at = "the newest" if scn is None else f"SCN {scn}"
    if entry is None:
        raise click.ClickException(f"no schema of {db}.{tbl} recorded at or before {at}")
    if entry.schema is None:
        since = "and not created again" if scn is None else f"and not created again by {at}"
        raise click.ClickException(f"{db}.{tbl} was dropped at SCN {entry.scn} {since}")
    if fmt == "json":
        document = {
            "schema": db,
            "table": tbl,
            "at_scn": None if scn is None else str(scn),
            "version_scn": str(entry.scn),
            **_columns_json(entry.schema),
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
        return
    click.echo(f"{db}.{tbl} at {at}: version of SCN {entry.scn}")
    click.echo(_columns_text(entry.schema))


def _known_hint(store: MetaStore) -> str:
    known = store.tables()
    if not known:
        return "; the metastore is empty"
    shown = ", ".join(f"{db}.{tbl}" for db, tbl in known[:10])
    more = f" and {len(known) - 10} more" if len(known) > 10 else ""
    return f"; known tables: {shown}{more}"


def _entry_json(entry: HistoryEntry) -> dict[str, Any]:
    document: dict[str, Any] = {
        "scn": str(entry.scn),
        "kind": entry.kind,
        "statement": entry.statement,
    }
    if entry.schema is not None:
        document.update(_columns_json(entry.schema))
    return document


def _columns_json(table: TableSchema) -> dict[str, Any]:
    columns = [
        {"name": c.name, "type": c.type, "nullable": c.nullable, "charset": c.charset}
        for c in table.columns
    ]
    return {"columns": columns, "primary_key": list(table.primary_key)}


def _entry_text(entry: HistoryEntry) -> str:
    lines = [f"SCN {entry.scn}  {entry.kind}"]
    if entry.statement is not None:
        lines += ["  " + line for line in entry.statement.strip().splitlines()]
    if entry.kind == "drop":
        lines.append("  (table dropped)")
    if entry.schema is not None:
        lines.append(_columns_text(entry.schema))
    return "\n".join(lines)


def _columns_text(table: TableSchema) -> str:
    """The columns as an aligned table, indented two spaces."""
    rows = [("#", "column", "type", "null", "charset", "key")]
    for number, column in enumerate(table.columns, start=1):
        rows.append(
            (
                str(number),
                column.name,
                column.type,
                "YES" if column.nullable else "NO",
                column.charset or "",
                _key_marker(table, column.name),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  "
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _key_marker(table: TableSchema, name: str) -> str:
    if name not in table.primary_key:
        return ""
    if len(table.primary_key) == 1:
        return "PK"
    return f"PK {table.primary_key.index(name) + 1}"
