"""The apply-side rewrites of events and triggers (drc.apply.objects), and the local trigger
guard's decisions (drc.apply.trigger_guard) against a fake session; the real servers are in
tests/integration/test_objects.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from drc.apply import objects
from drc.apply.trigger_guard import LocalTriggerGuard
from drc.config import DrcConfig
from drc.core.events import SchemaChange
from drc.core.target_errors import ApplyError
from drc.runtime import guards_local_triggers

TRIGGER = (
    "CREATE DEFINER=`drc`@`%` TRIGGER trg AFTER INSERT ON t FOR EACH ROW "
    "INSERT INTO audit (tid) VALUES (NEW.id)"
)
BODY = "INSERT INTO audit (tid) VALUES (NEW.id)"
GUARDED = (
    "CREATE OR REPLACE DEFINER=`drc`@`%` TRIGGER trg AFTER INSERT ON t FOR EACH ROW "
    "IF @drc_apply IS NULL THEN INSERT INTO audit (tid) VALUES (NEW.id); END IF"
)


class _Accounts:
    def account_exists(self, user: str, host: str) -> bool:
        return True


def test_events_are_applied_disabled_on_the_replica() -> None:
    change = SchemaChange("d", "CREATE EVENT e ON SCHEDULE EVERY 1 HOUR DO DELETE FROM a")
    out = objects.prepared(change, _Accounts(), "", "ch")
    assert out.statement == (
        "CREATE EVENT e ON SCHEDULE EVERY 1 HOUR DISABLE ON SLAVE DO DELETE FROM a"
    )
    alter = SchemaChange("d", "ALTER EVENT e ENABLE")
    assert objects.prepared(alter, _Accounts(), "", "ch").statement == (
        "ALTER EVENT e DISABLE ON SLAVE"
    )


def test_triggers_are_applied_guarded() -> None:
    out = objects.prepared(SchemaChange("d", TRIGGER), _Accounts(), "", "ch")
    assert out.statement == GUARDED.replace("CREATE OR REPLACE", "CREATE")


@dataclass
class _Stats:
    triggers_guarded: int = 0
    triggers_unguarded: int = 0


@dataclass
class _Session:
    body: str | None  # the server's trigger body (None: no such trigger)
    fail: bool = False
    ran: list[SchemaChange] = field(default_factory=list)

    def query(self, statement: Any, what: str) -> list[tuple[Any, ...]]:
        assert statement.params == ("d", "trg")
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


def _guarded(session: _Session, *statements: str) -> _Stats:
    stats = _Stats()
    guard = LocalTriggerGuard(lambda: session, stats)  # type: ignore[arg-type,return-value]
    for statement in statements:
        guard.submit(SchemaChange("d", statement))
    guard.close()
    return stats


def test_a_local_trigger_is_recreated_guarded() -> None:
    session = _Session(BODY)
    stats = _guarded(session, TRIGGER)
    assert session.ran == [SchemaChange("d", GUARDED)]
    assert (stats.triggers_guarded, stats.triggers_unguarded) == (1, 0)


def test_a_trigger_changed_or_dropped_since_is_left_alone() -> None:
    for body in ("SET @other = 1", None, f"IF @drc_apply IS NULL THEN {BODY}; END IF"):
        session = _Session(body)
        stats = _guarded(session, TRIGGER)
        assert session.ran == []
        assert stats.triggers_guarded == stats.triggers_unguarded == 0


def test_guarded_triggers_and_other_statements_are_not_touched() -> None:
    session = _Session(BODY)
    stats = _guarded(
        session,
        "CREATE TRIGGER trg AFTER INSERT ON t FOR EACH ROW IF @drc_apply IS NULL THEN "
        "SET @a = 1; END IF",
        "DROP TRIGGER trg",
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "CREATE VIEW v AS SELECT 1",
    )
    assert session.ran == []
    assert stats.triggers_guarded == 0


def test_a_refused_rewrite_is_counted_unguarded() -> None:
    session = _Session(BODY, fail=True)
    stats = _guarded(session, TRIGGER)
    assert (stats.triggers_guarded, stats.triggers_unguarded) == (0, 1)


def _config(*objects: list[str]) -> DrcConfig:
    return DrcConfig.model_validate({
        "datacenter": {"name": "dc1"},
        "source": {"user": "drc", "password": "pw"},
        "replicator": {"buffer_dir": "/tmp/x"},
        "channels": [{"name": f"c{i}", "origin": "dc2", "remote": ["http://dc2:8641"],
                      "objects": kinds} for i, kinds in enumerate(objects)],
    })  # fmt: skip


def test_local_triggers_are_guarded_unless_every_channel_leaves_triggers_out() -> None:
    assert guards_local_triggers(_config())  # channels run elsewhere
    assert guards_local_triggers(_config(["trigger"], []))
    assert not guards_local_triggers(_config(["view", "event"], []))
