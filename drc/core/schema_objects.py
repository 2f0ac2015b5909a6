"""Statements on views, stored routines, triggers and events: what they name, and the rewrites
the apply side makes before replaying them. Pure, no I/O.

What MariaDB 10.11 writes to the binlog (measured): CREATE statements get the definer spelled
out, e.g. ``CREATE DEFINER=`root`@`localhost` FUNCTION `d2`.`f`(x INT) RETURNS int(11) ...``,
``CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS ...``,
``CREATE DEFINER=`root`@`localhost` TRIGGER trg AFTER INSERT ON t FOR EACH ROW ...``; ALTER
FUNCTION/PROCEDURE/EVENT and every DROP are written as the user typed them. A name is qualified
as written, or lives in the session's default database (``change.schema``).

:func:`parse` reads just the head of such a statement (never raises: anything else is None).
:func:`guard_trigger` wraps a trigger body so it does nothing in DRC's apply sessions,
:func:`or_replace` makes a CREATE replace what it names (DRC re-creates a local trigger guarded),
:func:`disable_event_on_replica` makes an event's ``ENABLE`` a ``DISABLE ON SLAVE`` (as native
replication does), and :func:`with_definer` replaces the DEFINER clause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from drc.core.sqltokens import Token
from drc.core.sqltokens import tokens as lex
from drc.core.tablefilter import TableFilter

VIEW, FUNCTION, PROCEDURE, TRIGGER, EVENT = "view", "function", "procedure", "trigger", "event"
KINDS = (VIEW, FUNCTION, PROCEDURE, TRIGGER, EVENT)

# The guard DRC's own triggers use too (drc.conflicts.tombstones): apply sessions set
# @drc_apply = 1.
GUARD_OPEN = "IF @drc_apply IS NULL THEN "
GUARD_CLOSE = "; END IF"
_GUARDED = re.compile(r"\s*IF\s+@drc_apply\s+IS\s+NULL\s+THEN\b", re.IGNORECASE)

_PREFIX_WORDS = {"OR", "REPLACE", "AGGREGATE", "NONDETERMINISTIC"}


@dataclass(frozen=True, slots=True)
class SchemaObject:
    kind: str  # one of KINDS
    action: str  # "create", "alter" or "drop"
    schema: str  # the object's database (qualified name, else the default database)
    name: str
    table: str | None = None  # CREATE TRIGGER: the table it is on (in ``schema``)
    definer: tuple[str, str | None] | None = None  # (user, host) as written, host None if absent
    definer_span: tuple[int, int] | None = None  # where ``DEFINER = ...`` is in the statement
    body_start: int | None = None  # CREATE TRIGGER: where its body begins; CREATE EVENT: DO


def parse(statement: str, default_schema: str) -> SchemaObject | None:
    """The view, routine, trigger or event a CREATE/ALTER/DROP statement names, else None."""
    try:
        tokens = list(lex(statement))
    except ValueError:
        return None
    if not tokens or not tokens[0].is_word("CREATE", "ALTER", "DROP"):
        return None
    action, i = tokens[0].text.lower(), 1
    definer, span = None, None
    while i < len(tokens) and _kind(tokens[i]) is None:
        token = tokens[i]
        if token.is_word("DEFINER"):
            definer, span, i = _definer(tokens, i)
            if definer is None:
                return None
        elif token.is_word("ALGORITHM") and _at(tokens, i + 1, "="):
            i += 3
        elif token.is_word("SQL") and i + 1 < len(tokens) and tokens[i + 1].is_word("SECURITY"):
            i += 3
        elif token.is_word(*_PREFIX_WORDS):
            i += 1
        else:
            return None
    if i >= len(tokens):
        return None
    kind, i = _kind(tokens[i]), i + 1
    assert kind is not None
    i = _skip_if_exists(tokens, i)
    named = _name(tokens, i, default_schema)
    if named is None:
        return None
    schema, name, i = named
    found = SchemaObject(kind, action, schema, name, None, definer, span)
    if action == "create" and kind == TRIGGER:
        return _trigger(found, tokens, i)
    if action == "create" and kind == EVENT:
        do = next((t for t in tokens[i:] if t.is_word("DO")), None)
        return found if do is None else _replace(found, body_start=do.start)
    return found


def guard_trigger(statement: str, found: SchemaObject) -> str:
    """CREATE TRIGGER with its body wrapped in ``IF @drc_apply IS NULL THEN .. END IF``, so it
    does not fire for rows DRC's apply sessions write (their effect is already in them). A body
    already guarded that way is left as written."""
    if found.body_start is None:
        return statement
    body = statement[found.body_start :].rstrip().rstrip(";").rstrip()
    if _GUARDED.match(body):
        return statement
    return statement[: found.body_start] + GUARD_OPEN + body + GUARD_CLOSE


def guarded_body(body: str) -> bool:
    """Whether a trigger body (information_schema.TRIGGERS.ACTION_STATEMENT) does nothing for
    DRC's apply sessions: all of it inside ``IF @drc_apply IS NULL THEN .. END IF``."""
    body = body.strip().rstrip(";").rstrip()
    return bool(_GUARDED.match(body)) and re.search(r"\bEND\s+IF$", body, re.IGNORECASE) is not None


def is_guarded(statement: str, found: SchemaObject) -> bool:
    return found.body_start is not None and bool(_GUARDED.match(statement, found.body_start))


def or_replace(statement: str) -> str:
    """``CREATE [OR REPLACE] [IF NOT EXISTS] ...`` as ``CREATE OR REPLACE ...`` (MariaDB refuses
    the two together); anything else is returned as written."""
    try:
        tokens = list(lex(statement))
    except ValueError:
        return statement
    if len(tokens) < 2 or not tokens[0].is_word("CREATE"):
        return statement
    kind = next((k for k, t in enumerate(tokens) if _kind(t) is not None), None)
    if kind is not None and _skip_if_exists(tokens, kind + 1) != kind + 1:
        start, end = tokens[kind + 1].start, tokens[kind + 3].end  # IF NOT EXISTS
        statement = statement[:start] + statement[end:].lstrip()
    if tokens[1].is_word("OR"):
        return statement
    return statement[: tokens[0].end] + " OR REPLACE" + statement[tokens[0].end :]


def disable_event_on_replica(statement: str) -> str:
    """CREATE/ALTER EVENT with ``ENABLE`` (for CREATE also: no status, which means ENABLE) as
    ``DISABLE ON SLAVE``: the event runs only on the datacenter it was created on, whose writes
    replicate like any other. Other statements are returned as written."""
    try:
        tokens = list(lex(statement))
    except ValueError:
        return statement
    head = next((k for k, t in enumerate(tokens) if _kind(t) is not None), None)
    if head is None or _kind(tokens[head]) != EVENT or not tokens[0].is_word("CREATE", "ALTER"):
        return statement
    named = _name(tokens, _skip_if_exists(tokens, head + 1), "")
    if named is None:
        return statement
    start = named[2]
    stop = next((k for k in range(start, len(tokens)) if tokens[k].is_word("DO")), len(tokens))
    for k in range(start, stop):
        if tokens[k].is_word("ENABLE"):
            return statement[: tokens[k].start] + "DISABLE ON SLAVE" + statement[tokens[k].end :]
        if tokens[k].is_word("DISABLE"):
            return statement  # DISABLE or DISABLE ON SLAVE already
    if not tokens[0].is_word("CREATE") or stop == len(tokens):
        return statement  # an ALTER without a status keeps the event's status
    at = next((k for k in range(start, stop) if tokens[k].is_word("COMMENT")), stop)
    position = tokens[at].start
    return statement[:position] + "DISABLE ON SLAVE " + statement[position:]


def with_definer(statement: str, found: SchemaObject, definer: str) -> str:
    """The statement with its DEFINER clause naming ``definer`` instead: an account as SQL
    text (drc.mysql.sql.account quotes one)."""
    if found.definer_span is None:
        return statement
    start, end = found.definer_span
    return statement[:start] + "DEFINER=" + definer + statement[end:]


def split_account(account: str) -> tuple[str, str]:
    """``"user@host"`` -> (user, host); the host defaults to ``%``."""
    user, _, host = account.rpartition("@") if "@" in account else (account, "", "%")
    return user.strip("`'\""), (host or "%").strip("`'\"")


def kept_by(found: SchemaObject, tables: TableFilter) -> bool:
    """Whether a table filter keeps the object: a trigger follows its table, the others (and
    a DROP TRIGGER, which names no table) their database."""
    if found.table is not None:
        return tables.matches(found.schema, found.table)
    return tables.may_match_db(found.schema)


def _replace(found: SchemaObject, **changes: object) -> SchemaObject:
    from dataclasses import replace

    return replace(found, **changes)  # type: ignore[arg-type]


def _kind(token: Token) -> str | None:
    if token.is_word("VIEW", "FUNCTION", "PROCEDURE", "TRIGGER", "EVENT"):
        return token.text.lower()
    return None


def _at(tokens: list[Token], i: int, punct: str) -> bool:
    return i < len(tokens) and tokens[i].kind == "punct" and tokens[i].text == punct


def _definer(
    tokens: list[Token], i: int
) -> tuple[tuple[str, str | None] | None, tuple[int, int] | None, int]:
    start = tokens[i].start
    i += 1
    if _at(tokens, i, "="):
        i += 1
    if i >= len(tokens):
        return None, None, i
    user = tokens[i]
    i += 1
    if user.is_word("CURRENT_USER") and _at(tokens, i, "(") and _at(tokens, i + 1, ")"):
        i += 2
    host: str | None = None
    if _at(tokens, i, "@") and i + 1 < len(tokens):
        host = tokens[i + 1].text
        i += 2
    return (user.text, host), (start, tokens[i - 1].end), i


def _skip_if_exists(tokens: list[Token], i: int) -> int:
    words = [t.text.upper() if t.kind == "word" else "" for t in tokens[i : i + 3]]
    if words[:2] == ["IF", "EXISTS"]:
        return i + 2
    if words == ["IF", "NOT", "EXISTS"]:
        return i + 3
    return i


def _name(tokens: list[Token], i: int, default_schema: str) -> tuple[str, str, int] | None:
    if i >= len(tokens) or tokens[i].kind not in ("word", "quoted"):
        return None
    first = tokens[i].text
    if _at(tokens, i + 1, ".") and i + 2 < len(tokens) and tokens[i + 2].kind != "punct":
        return first, tokens[i + 2].text, i + 3
    return default_schema, first, i + 1


def _trigger(found: SchemaObject, tokens: list[Token], i: int) -> SchemaObject | None:
    """``{BEFORE|AFTER} event ON table FOR EACH ROW [{FOLLOWS|PRECEDES} other] body``."""
    on = next((k for k in range(i, len(tokens)) if tokens[k].is_word("ON")), None)
    if on is None:
        return None
    named = _name(tokens, on + 1, found.schema)
    if named is None:
        return None
    _schema, table, k = named
    if [t.text.upper() for t in tokens[k : k + 3]] != ["FOR", "EACH", "ROW"]:
        return None
    k += 3
    if k < len(tokens) and tokens[k].is_word("FOLLOWS", "PRECEDES"):
        named = _name(tokens, k + 1, found.schema)
        k = named[2] if named is not None else k + 2
    if k >= len(tokens):
        return None
    return _replace(found, table=table, body_start=tokens[k].start)
