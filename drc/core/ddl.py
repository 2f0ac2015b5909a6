"""Which tables a DDL statement creates, alters, drops, renames or truncates. Pure, no I/O.

:func:`ddl_tables` reads just enough of a MySQL/MariaDB statement to name the tables it touches
and how; everything after the names (column definitions, options) is ignored, and anything that
is not a table statement gives ``[]``. It never raises on odd input: an unparsable statement is
"not a table statement", and the caller still records it as plain DDL.

Kinds, in statement order:

    CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t ...      (s, t, "create")
    ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] t ...      (s, t, "alter")
    ALTER TABLE a RENAME [TO|AS] b                       (s, a, "rename_from"), (s, b, "rename_to")
    ALTER TABLE a ADD ..., RENAME TO b                   (s, a, "rename_from"), (s, b, "alter")
    DROP TABLE[S] [IF EXISTS] a, b ...                   (s, a, "drop"), (s, b, "drop")
    RENAME TABLE[S] a TO b, c TO d                       a rename_from, b rename_to, c ..., d ...
    TRUNCATE [TABLE] t                                   (s, t, "truncate")

A ``rename_to`` always directly follows its ``rename_from``; the new table has exactly the old
table's columns. When an ALTER also changes the definition, the new name is reported as
``alter`` instead, because the old columns no longer describe it.

TEMPORARY tables give ``[]``: they live in one session and shadow, never change, the real table.
Names are returned as written (case kept; MySQL's lower_case_table_names is the server's
business), unquoted; a bare name is resolved against ``change.schema``. Comments (``/* */``,
``-- ``, ``#``) are skipped; the content of version comments (``/*!50100 ... */``) is read as SQL,
like the server does. Backquoted names may contain doubled backticks; double-quoted names are
accepted in name positions (sql_mode ANSI_QUOTES).
"""

from __future__ import annotations

import re
from itertools import takewhile

from drc.core.events import SchemaChange
from drc.core.sqltokens import Token, UnterminatedQuote, tokens

CREATE = "create"
ALTER = "alter"
DROP = "drop"
RENAME_FROM = "rename_from"
RENAME_TO = "rename_to"
TRUNCATE = "truncate"

_NOT_TABLE_RENAMES = {"COLUMN", "INDEX", "KEY", "CONSTRAINT"}
_NAME_PART = r"(`(?:[^`]|``)+`|[^.`\s;]+)"
_QUALIFIED = re.compile(_NAME_PART + r"\." + _NAME_PART)


class _Unparsable(Exception):
    """The statement is not the table statement it started out looking like."""


class _Cursor:
    def __init__(self, sql: str) -> None:
        try:  # up to the first top-level ``;``
            self.tokens = list(takewhile(lambda t: t.kind != "punct" or t.text != ";", tokens(sql)))
        except UnterminatedQuote as exc:
            raise _Unparsable(str(exc)) from exc
        self.pos = 0

    def peek(self, ahead: int = 0) -> Token | None:
        index = self.pos + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def at(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token.is_word(*words)

    def at_punct(self, char: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == "punct" and token.text == char

    def take(self, *words: str) -> bool:
        """Consume the next token if it is one of ``words``."""
        if self.at(*words):
            self.pos += 1
            return True
        return False

    def take_all(self, *words: str) -> bool:
        """Consume ``words`` in sequence, or nothing if they are not all there."""
        if all((t := self.peek(k)) is not None and t.is_word(w) for k, w in enumerate(words)):
            self.pos += len(words)
            return True
        return False

    def identifier(self) -> str:
        token = self.peek()
        if token is None or token.kind not in ("word", "quoted"):
            raise _Unparsable("expected a name")
        self.pos += 1
        return token.text

    def name(self, default_schema: str) -> tuple[str, str]:
        """``db.tbl`` or a bare ``tbl`` (in ``default_schema``), quoted or not."""
        first = self.identifier()
        if not self.at_punct("."):
            return default_schema, first
        self.pos += 1
        return first, self.identifier()


def parse_table_name(text: str) -> tuple[str, str]:
    """Parse an operator's ``DB.TABLE`` (either part may be backquoted) into ``(db, tbl)``.

    Stricter than statement parsing: exactly one dot outside backquotes, no spaces, comments or
    empty parts. Raises ValueError saying what was expected.
    """
    match = _QUALIFIED.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not DB.TABLE; quote a part that contains a dot with backquotes, "
            "e.g. `my.db`.orders"
        )
    return _unquote(match.group(1)), _unquote(match.group(2))


def _unquote(part: str) -> str:
    return part[1:-1].replace("``", "`") if part.startswith("`") else part


def ddl_tables(change: SchemaChange) -> list[tuple[str, str, str]]:
    """``(schema, table, kind)`` for each table the statement touches; ``[]`` if not a table DDL."""
    try:
        cursor = _Cursor(change.statement)
        verb = cursor.peek()
        if verb is None or verb.kind != "word":
            return []
        parse = _PARSERS.get(verb.text.upper())
        if parse is None:
            return []
        cursor.pos += 1
        return parse(cursor, change.schema)
    except _Unparsable:
        return []


def dropped_database(change: SchemaChange) -> str | None:
    """The database a ``DROP {DATABASE|SCHEMA} [IF EXISTS] db`` removes, else None."""
    try:
        cursor = _Cursor(change.statement)
        if not (cursor.take("DROP") and cursor.take("DATABASE", "SCHEMA")):
            return None
        cursor.take_all("IF", "EXISTS")
        return cursor.identifier()
    except _Unparsable:
        return None


def alter_clauses(change: SchemaChange) -> tuple[str, str, str] | None:
    """``(schema, table, clauses)`` of a plain ``ALTER TABLE t <clauses>``: the clauses as the
    statement wrote them, for running them on another table. None for anything else: another
    statement, ``ALTER ONLINE|OFFLINE|IGNORE`` or ``IF EXISTS``, a clause renaming the table,
    no clause, or a comment among the clauses (a version comment's text may be cut open)."""
    try:
        cursor = _Cursor(change.statement)
        if not (cursor.take("ALTER") and cursor.take("TABLE")) or cursor.at("IF"):
            return None
        schema, table = cursor.name(change.schema)
        clauses = _top_level_clauses(cursor)
        if not clauses or any(_rename_target(c, schema) is not None for c in clauses):
            return None
        rest = cursor.tokens[cursor.pos :]
        text = change.statement[rest[0].start : rest[-1].end]
        bare = list(text)  # the text outside quotes: a comment there may be cut open
        for token in rest:
            if token.kind != "word" and token.kind != "punct":
                bare[token.start - rest[0].start : token.end - rest[0].start] = " " * (
                    token.end - token.start
                )
        if "/*" in "".join(bare) or "*/" in "".join(bare):
            return None
        return schema, table, text
    except (_Unparsable, UnterminatedQuote):
        return None


def _create(cursor: _Cursor, schema: str) -> list[tuple[str, str, str]]:
    cursor.take_all("OR", "REPLACE")
    if cursor.at("TEMPORARY") or not cursor.take("TABLE"):
        return []
    cursor.take_all("IF", "NOT", "EXISTS")
    return [(*cursor.name(schema), CREATE)]


def _alter(cursor: _Cursor, schema: str) -> list[tuple[str, str, str]]:
    while cursor.take("ONLINE", "OFFLINE", "IGNORE"):
        pass
    if not cursor.take("TABLE"):
        return []
    cursor.take_all("IF", "EXISTS")
    old = cursor.name(schema)
    clauses = _top_level_clauses(cursor)
    for clause in clauses:
        new = _rename_target(clause, schema)
        if new is not None:
            kind = RENAME_TO if len(clauses) == 1 else ALTER
            return [(*old, RENAME_FROM), (*new, kind)]
    return [(*old, ALTER)]


def _top_level_clauses(cursor: _Cursor) -> list[list[Token]]:
    """The rest of the statement split on commas outside parentheses."""
    clauses: list[list[Token]] = [[]]
    depth = 0
    for token in cursor.tokens[cursor.pos :]:
        if token.kind == "punct" and token.text in "()":
            depth += 1 if token.text == "(" else -1
        if token.kind == "punct" and token.text == "," and depth == 0:
            clauses.append([])
        else:
            clauses[-1].append(token)
    return [clause for clause in clauses if clause]


def _rename_target(clause: list[Token], schema: str) -> tuple[str, str] | None:
    """The new name if ``clause`` is ``RENAME [TO|AS] name`` (not RENAME COLUMN/INDEX/KEY)."""
    if not clause[0].is_word("RENAME") or len(clause) < 2:
        return None
    if clause[1].is_word(*_NOT_TABLE_RENAMES):
        return None
    cursor = _Cursor("")
    cursor.tokens = clause[1:]
    cursor.take("TO", "AS")
    return cursor.name(schema)


def _drop(cursor: _Cursor, schema: str) -> list[tuple[str, str, str]]:
    if cursor.at("TEMPORARY") or not cursor.take("TABLE", "TABLES"):
        return []
    cursor.take_all("IF", "EXISTS")
    found = [(*cursor.name(schema), DROP)]
    while cursor.at_punct(","):
        cursor.pos += 1
        found.append((*cursor.name(schema), DROP))
    return found


def _rename(cursor: _Cursor, schema: str) -> list[tuple[str, str, str]]:
    if not cursor.take("TABLE", "TABLES"):
        return []  # RENAME USER and the like
    cursor.take_all("IF", "EXISTS")
    found: list[tuple[str, str, str]] = []
    while True:
        found.append((*cursor.name(schema), RENAME_FROM))
        if cursor.take("WAIT"):  # MariaDB: RENAME TABLE t WAIT n TO u
            cursor.identifier()
        cursor.take("NOWAIT")
        if not cursor.take("TO"):
            raise _Unparsable("RENAME without TO")
        found.append((*cursor.name(schema), RENAME_TO))
        if not cursor.at_punct(","):
            return found
        cursor.pos += 1


def _truncate(cursor: _Cursor, schema: str) -> list[tuple[str, str, str]]:
    cursor.take("TABLE")
    return [(*cursor.name(schema), TRUNCATE)]


_PARSERS = {
    "CREATE": _create,
    "ALTER": _alter,
    "DROP": _drop,
    "RENAME": _rename,
    "TRUNCATE": _truncate,
}
