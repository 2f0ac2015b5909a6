"""A fake target session for the local trigger guard (drc.apply.trigger_guard): it answers the
trigger's body, keeps what the guard runs, and may refuse it; the guard run over it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from drc.apply.trigger_guard import LocalTriggerGuard
from drc.core.events import SchemaChange
from drc.core.target_errors import ApplyError


@dataclass
class GuardStats:
    triggers_guarded: int = 0
    triggers_unguarded: int = 0


@dataclass
class GuardSession:
    """``body``: the server's trigger body (None: no such trigger); ``fail``: running the
    rewrite is refused; ``asked``: the (schema, trigger) of each body read; ``ran``: what ran."""

    body: str | None
    fail: bool = False
    asked: list[tuple[Any, ...]] = field(default_factory=list)
    ran: list[SchemaChange] = field(default_factory=list)

    def query(self, statement: Any, what: str) -> list[tuple[Any, ...]]:
        self.asked.append(statement.params)
        return [] if self.body is None else [(self.body,)]

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass

    @contextmanager
    def ddl_session(self, what: str) -> Iterator[Any]:
        yield self

    def run(self, change: SchemaChange, timestamp: int = 0) -> None:
        if self.fail:
            raise ApplyError("TRIGGER command denied", 1142)
        self.ran.append(change)


def guarded(
    session: GuardSession, *statements: str, schema: str = "d", replays_tools: bool = False
) -> GuardStats:
    """The guard's counts once it took ``statements`` (run in ``schema``) over ``session``."""
    stats = GuardStats()
    guard = LocalTriggerGuard(
        lambda: session,  # type: ignore[arg-type,return-value]
        stats,
        replays_tools=replays_tools,
    )
    for statement in statements:
        guard.submit(SchemaChange(schema, statement))
    guard.close()
    return stats
