"""Table filters: which ``db.table`` names a capture, a subscription or a channel wants.

A pattern is ``db.table`` where either part may use shell wildcards (``*``, ``?``, ``[...]``);
names are matched case-sensitively, as MariaDB on Linux stores them. A filter keeps a table when
it matches some include pattern (no include patterns = every table) and no exclude pattern.
Bad patterns are refused when the filter is built, with the pattern and the expected form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import translate
from functools import lru_cache

from drc.core.errors import shown


class TableFilterError(ValueError):
    """A pattern that is not ``db.table``; the message names it and shows the expected form."""


@dataclass(frozen=True, slots=True)
class TablePattern:
    text: str
    _db: re.Pattern[str]
    _table: re.Pattern[str]

    @classmethod
    def parse(cls, text: str) -> TablePattern:
        db, dot, table = text.partition(".")
        if not dot or not db or not table or "." in table or text != text.strip():
            raise TableFilterError(
                f"table pattern {shown(text)} must look like db.table (wildcards * ? [..] allowed, "
                "e.g. shop.orders, shop.*, *.audit_*)"
            )
        return cls(text, re.compile(translate(db)), re.compile(translate(table)))

    def matches(self, db: str, table: str) -> bool:
        return self._db.match(db) is not None and self._table.match(table) is not None

    def may_match_db(self, db: str) -> bool:
        return self._db.match(db) is not None


@dataclass(frozen=True, slots=True)
class TableFilter:
    include: tuple[TablePattern, ...] = ()
    exclude: tuple[TablePattern, ...] = ()

    @classmethod
    def build(
        cls, include: list[str] | tuple[str, ...] = (), exclude: list[str] | tuple[str, ...] = ()
    ) -> TableFilter:
        return cls(
            tuple(TablePattern.parse(p) for p in include),
            tuple(TablePattern.parse(p) for p in exclude),
        )

    @classmethod
    def parse_list(cls, text: str) -> TableFilter:
        """A comma-separated include list, as in ``?tables=db.t,db2.*``; empty = everything."""
        patterns = [p for p in (part.strip() for part in text.split(",")) if p]
        if text.strip() and not patterns:
            raise TableFilterError(f"table filter {shown(text)} names no table pattern")
        return cls.build(patterns)

    @property
    def matches_everything(self) -> bool:
        return not self.include and not self.exclude

    def matches(self, db: str, table: str) -> bool:
        return _cached_match(self, db, table)

    def may_match_db(self, db: str) -> bool:
        """Whether some table of ``db`` could be kept (for DDL that names no table)."""
        included = not self.include or any(p.may_match_db(db) for p in self.include)
        return included and not any(p.text == f"{db}.*" or p.text == "*.*" for p in self.exclude)


@lru_cache(maxsize=65536)
def _cached_match(filter_: TableFilter, db: str, table: str) -> bool:
    # Called per row change: the cache turns regex matching into one dict lookup per table.
    if filter_.include and not any(p.matches(db, table) for p in filter_.include):
        return False
    return not any(p.matches(db, table) for p in filter_.exclude)
