"""The apply-side rewrites of events and triggers (drc.apply.objects), and the local trigger
guard's decisions (drc.apply.trigger_guard) against a fake session; the real servers are in
tests/integration/test_objects.py."""

from __future__ import annotations

from drc.apply import objects
from drc.core.events import SchemaChange
from drc.runtime import guards_local_triggers
from tests.support.config import with_channels
from tests.support.guard_session import GuardSession, guarded

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


def test_a_local_trigger_is_recreated_guarded() -> None:
    session = GuardSession(BODY)
    stats = guarded(session, TRIGGER)
    assert session.asked == [("d", "trg")]
    assert session.ran == [SchemaChange("d", GUARDED)]
    assert (stats.triggers_guarded, stats.triggers_unguarded) == (1, 0)


def test_a_trigger_changed_or_dropped_since_is_left_alone() -> None:
    for body in ("SET @other = 1", None, f"IF @drc_apply IS NULL THEN {BODY}; END IF"):
        session = GuardSession(body)
        stats = guarded(session, TRIGGER)
        assert session.asked == [("d", "trg")]
        assert session.ran == []
        assert stats.triggers_guarded == stats.triggers_unguarded == 0


def test_guarded_triggers_and_other_statements_are_not_touched() -> None:
    session = GuardSession(BODY)
    stats = guarded(
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
    session = GuardSession(BODY, fail=True)
    stats = guarded(session, TRIGGER)
    assert (stats.triggers_guarded, stats.triggers_unguarded) == (0, 1)


def test_local_triggers_are_guarded_unless_every_channel_leaves_triggers_out() -> None:
    assert guards_local_triggers(with_channels())  # channels run elsewhere
    assert guards_local_triggers(with_channels({"objects": ["trigger"]}, {"objects": []}))
    assert not guards_local_triggers(with_channels({"objects": ["view", "event"]}, {"objects": []}))
