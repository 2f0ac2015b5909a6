"""Statements that carry secrets: account and privilege statements. Pure.

``CREATE USER 'bob'@'%' IDENTIFIED BY 'plain text'`` reaches the binlog as written (MariaDB
does not rewrite the password), and so do GRANT .. IDENTIFIED BY, ALTER USER and
IDENTIFIED VIA .. USING PASSWORD('..'). Accounts and privileges are per datacenter, so the
replicator never stores these statements: it drops them at capture and counts them.

A statement is recognised on its tokens (drc.core.sqltokens), not on its text: comments
anywhere (``CREATE /* c */ USER``, ``CREATE -- c`` newline ``USER``), executable comments
read as code (``/*! CREATE USER .. */``, ``/*!50600 ..``, ``/*M!100100 ..``), any case or
spacing, an optional ``SET STATEMENT var = value [, ...] FOR`` prefix. Whether a backslash
escapes inside quotes depends on the session's sql_mode (NO_BACKSLASH_ESCAPES, ANSI_QUOTES),
which the binlog text does not carry, and a quote read the wrong way can hide the FOR of a
``SET STATEMENT default_master_connection='\\', .. FOR CREATE USER ..``. So the statement is
read in each of the three ways and is an account statement if any reading says so, or if a
reading finds a quote that never ends (the server accepted the statement: that reading is
wrong, and dropping errs on the safe side).

Anything that logs a statement text, or puts it in an error, goes through :func:`for_log`: an
account statement is never shown (e.g. one already in a buffer written by an older version),
and every quoted literal of any other statement is masked (:func:`redacted`).
"""

from __future__ import annotations

from collections.abc import Iterator

from drc.core.sqltokens import Token, UnterminatedQuote, tokens

LOG_CHARS = 200
HIDDEN = "<account or privilege statement, not shown>"
MASK = "'?'"

# The quote characters inside which a backslash escapes: by default, with ANSI_QUOTES ("..."
# is a name), with NO_BACKSLASH_ESCAPES.
_READINGS = ("'\"", "'", "")
_ACCOUNT_VERBS = frozenset({"CREATE", "ALTER", "DROP", "RENAME"})
_ACCOUNT_OBJECTS = frozenset({"USER", "ROLE"})
_DEPTH = {"(": 1, ")": -1}


def is_account_statement(sql: str) -> bool:
    """CREATE/ALTER/DROP/RENAME [OR REPLACE] USER or ROLE, GRANT, REVOKE, SET PASSWORD,
    SET [DEFAULT] ROLE, each also after SET STATEMENT .. FOR, however spelled."""
    for escapes in _READINGS:
        try:
            if _account_at(_Read(sql, escapes), 0):
                return True
        except UnterminatedQuote:
            return True
    return False


def redacted(sql: str) -> str:
    """``sql`` with every quoted literal ('...' or "...", in any of the three readings) shown
    as '?'; a quote that never ends masks the rest. Backquoted names and comments stay."""
    spans = sorted(span for escapes in _READINGS for span in _literals(sql, escapes))
    parts, shown_to = [], 0
    for start, end in spans:
        if end <= shown_to:
            continue  # inside a literal already masked
        if start >= shown_to:
            parts += [sql[shown_to:start], MASK]
        shown_to = end
    parts.append(sql[shown_to:])
    return "".join(parts)


def for_log(sql: str) -> str:
    """A statement as it may appear in a log line or error: never an account one, literals
    masked, cut after :data:`LOG_CHARS` characters."""
    if is_account_statement(sql):
        return HIDDEN
    if len(sql) <= LOG_CHARS:
        return redacted(sql)
    return redacted(sql[:LOG_CHARS]) + "..."  # a literal cut short is masked to the end


class _Read:
    """A statement's tokens in one reading, lexed only as far as looked at (the body of a
    long statement never is)."""

    def __init__(self, sql: str, escapes: str) -> None:
        self._tokens: Iterator[Token] = tokens(sql, escapes)
        self._seen: list[Token] = []

    def at(self, i: int) -> Token | None:
        while len(self._seen) <= i:
            token = next(self._tokens, None)
            if token is None:
                return None
            self._seen.append(token)
        return self._seen[i]

    def word(self, i: int) -> str:
        """The unquoted word at ``i``, upper case; "" for anything else."""
        token = self.at(i)
        return token.text.upper() if token is not None and token.kind == "word" else ""


def _account_at(read: _Read, i: int) -> bool:
    """Whether the statement starting at token ``i`` is an account statement."""
    word = read.word(i)
    if word in ("GRANT", "REVOKE"):
        return True
    if word in _ACCOUNT_VERBS:
        i += 1
        if read.word(i) == "OR" and read.word(i + 1) == "REPLACE":
            i += 2
        return read.word(i) in _ACCOUNT_OBJECTS
    if word == "SET":
        if read.word(i + 1) == "STATEMENT":
            return _after_set_statement(read, i + 2)
        return _sets_account(read, i + 1)
    return False


def _after_set_statement(read: _Read, i: int) -> bool:
    """SET STATEMENT var = value [, ...] FOR statement: the statement after each FOR is tried,
    up to the first FOR outside parentheses (the one the server reads)."""
    depth = 0
    while (token := read.at(i)) is not None:
        if token.is_word("FOR"):
            if _account_at(read, i + 1):
                return True
            if depth == 0:
                return False
        elif token.kind == "punct":
            depth += _DEPTH.get(token.text, 0)
        i += 1
    return False


def _sets_account(read: _Read, i: int) -> bool:
    """SET item [, item ...] where an item is PASSWORD [FOR ..] = .., ROLE .. or DEFAULT ROLE
    (``SET @a = 1, PASSWORD = ..`` is accepted too)."""
    depth, item_start = 0, True
    while (token := read.at(i)) is not None:
        if item_start and (
            token.is_word("PASSWORD", "ROLE")
            or (token.is_word("DEFAULT") and read.word(i + 1) == "ROLE")
        ):
            return True
        item_start = False
        if token.kind == "punct":
            depth += _DEPTH.get(token.text, 0)
            item_start = depth == 0 and token.text == ","
        i += 1
    return False


def _literals(sql: str, escapes: str) -> list[tuple[int, int]]:
    """The spans of the quoted literals of one reading of ``sql``."""
    found = []
    try:
        for token in tokens(sql, escapes):
            if token.kind == "string" or (token.kind == "quoted" and sql[token.start] == '"'):
                found.append((token.start, token.end))
    except UnterminatedQuote as exc:
        found.append((exc.start, len(sql)))
    return found
