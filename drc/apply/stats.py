"""What an apply channel has done, for status, metrics and tests (read from any thread)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from drc.apply.plan import Effects
from drc.core.scn import SCN


class Committed(Protocol):
    """What one committed group did (drc.apply.writer.Written)."""

    @property
    def effects(self) -> Effects: ...
    @property
    def conflict_tables(self) -> list[str]: ...
    @property
    def replays(self) -> int: ...
    @property
    def parts(self) -> int: ...


@dataclass
class ApplyStats(Effects):
    """Effects' counters (rows written, idempotent fixes, conflicts) summed, and the rest."""

    transactions: int = 0  # source transactions applied (something was written)
    ddl: int = 0  # DDL statements run
    commits: int = 0  # target transactions committed
    parallel_parts: int = 0  # of them, parts of groups written on several connections at once
    skipped: int = 0  # source transactions received with nothing to write
    ddl_skipped: int = 0  # DDL not applicable here (GRANT, triggers, mapped tables...)
    retries: int = 0  # target transactions re-applied after a deadlock / lock wait timeout
    waits: int = 0  # waits for a target that was down or read-only
    last_scn: SCN | None = None  # the checkpoint: last SCN applied (durably)
    # The newest error seen (a stop, a retry, a wait); status shows it only while stopped.
    last_error: str | None = None
    # The newest stop: {"at": Unix time, "error": ...}, kept after a skip, resume or rewind.
    last_stop: dict[str, object] | None = None
    conflicts_by_table: dict[str, int] = field(default_factory=dict)  # "db.t" -> conflicts
    replays: int = 0  # changes a rewind replayed over rows already newer (not conflicts)

    @property
    def idempotent_fixes(self) -> int:
        return self.fixes

    def committed(self, written: Committed, transactions: int, last_scn: SCN) -> None:
        """A group of ``transactions`` source transactions committed up to ``last_scn``."""
        self.commits += 1 + written.parts
        self.parallel_parts += written.parts
        self.transactions += transactions
        self.add(written.effects)
        self.add_conflicts(written.conflict_tables, written.replays)
        self.last_scn = last_scn

    def add_conflicts(self, tables: Iterable[str], replays: int) -> None:
        """Where a committed group's conflicts were (``db.table`` each), and its replays."""
        for name in tables:
            self.conflicts_by_table[name] = self.conflicts_by_table.get(name, 0) + 1
        self.replays += replays

    def as_dict(self) -> dict[str, object]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["last_scn"] = None if self.last_scn is None else str(self.last_scn)
        data["idempotent_fixes"] = self.idempotent_fixes
        data["conflicts_by_table"] = dict(self.conflicts_by_table)
        data["last_stop"] = None if self.last_stop is None else dict(self.last_stop)
        return data
