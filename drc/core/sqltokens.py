"""A MySQL/MariaDB statement as tokens: just enough lexing for DRC's statement readers
(drc.core.ddl, drc.core.schema_objects). Pure.

Whitespace and comments (``/* */``, ``-- ``, ``#``) are dropped; the content of executable
comments (``/*! ... */``, ``/*!50100 ... */``, ``/*M! ... */``, ``/*M!100100 ... */``) is read
as SQL whatever its version (the server may skip one meant for another version: reading it
anyway errs towards seeing more). ``--`` starts a comment when a space or a control character
follows it, as in the server. Quoted tokens are unquoted (a doubled quote is one quote; a
backslash escapes inside '...' and "...", unless ``escapes`` says otherwise: the session's
sql_mode NO_BACKSLASH_ESCAPES or ANSI_QUOTES changes that, and a binlog statement does not say
which was on). An unterminated quote raises :class:`UnterminatedQuote`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

WORD = re.compile(r"[0-9A-Za-z_$\u0080-\U0010ffff]+")
_VERSION_COMMENT = re.compile(r"/\*M?!\d*")


class UnterminatedQuote(ValueError):
    """A quoted token runs to the end of the statement; ``start`` is where its quote is."""

    def __init__(self, quote: str, start: int) -> None:
        super().__init__(f"unterminated {quote}")
        self.start = start


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "word" (unquoted), "quoted" (`x` or "x"), "string" ('x'), "punct"
    text: str  # the identifier or string unquoted, or the punctuation character
    start: int  # span in the statement
    end: int

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words


def tokens(sql: str, escapes: str = "'\"") -> Iterator[Token]:
    """The statement's tokens with their spans, in order. ``escapes``: the quote characters
    inside which a backslash escapes the next character."""
    i, n, open_versions = 0, len(sql), 0
    while i < n:
        ch = sql[i]
        if ch.isspace():
            i += 1
        elif match := _VERSION_COMMENT.match(sql, i):
            open_versions += 1
            i = match.end()
        elif sql.startswith("*/", i) and open_versions:
            open_versions -= 1
            i += 2
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch == "#" or (sql.startswith("--", i) and (i + 2 == n or _blank(sql[i + 2]))):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif ch in "`\"'":
            text, end = _quoted(sql, i, ch in escapes)
            yield Token("string" if ch == "'" else "quoted", text, i, end)
            i = end
        elif match := WORD.match(sql, i):
            yield Token("word", match.group(), i, match.end())
            i = match.end()
        else:
            yield Token("punct", ch, i, i + 1)
            i += 1


def _blank(ch: str) -> bool:
    """What may follow ``--`` in a comment: a space or a control character, as the server's
    my_isspace or my_iscntrl (``--`` then byte 0x01 starts a comment too)."""
    return ch.isspace() or ch < " " or ch == "\x7f"


def _quoted(sql: str, start: int, escapes: bool) -> tuple[str, int]:
    """The unquoted text of the quoted token at ``start`` and the index after it."""
    quote, parts, i = sql[start], [], start + 1
    while i < len(sql):
        ch = sql[i]
        if ch == quote:
            if sql.startswith(quote * 2, i):
                parts.append(quote)
                i += 2
                continue
            return "".join(parts), i + 1
        if ch == "\\" and escapes and quote != "`" and i + 1 < len(sql):
            parts.append(sql[i + 1])
            i += 2
            continue
        parts.append(ch)
        i += 1
    raise UnterminatedQuote(quote, start)
