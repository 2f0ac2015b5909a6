"""Guard the triggers created on this datacenter, as channels guard the ones they replicate.

A channel applies a replicated CREATE TRIGGER with its body wrapped in ``IF @drc_apply IS NULL
THEN .. END IF`` (drc.apply.objects), so rows channels apply there do not fire it again: they
already hold its effect, replicated from where it fired. The trigger as a user created it here
needs the same wrapper, or rows channels apply *here* fire it a second time. So when the local
replicator captures a ``CREATE TRIGGER`` a local session ran (not one DRC ran), this re-creates
it here with the wrapper (``CREATE OR REPLACE`` on an apply session, whose skip_replication
keeps it from being replicated), and both datacenters end with the same SHOW CREATE TRIGGER.

It replaces the trigger only while the server still holds the captured body: a trigger dropped
or re-created since is left alone (its own statement is captured in turn), and a statement
captured again after a restart finds the wrapped body and does nothing. From the user's CREATE
until the rewrite (milliseconds) a row a channel applies here may fire it unguarded; a body
written as ``IF @drc_apply IS NULL THEN .. END IF`` closes that window. A trigger that cannot be
replaced (the apply user lacks TRIGGER, or SET USER for another definer) is counted in
``triggers_unguarded`` and logged with what to do.

This runs beside capture (the replicator's process; ``submit`` is its hook), not as a channel
like the lww guard: triggers may be on any captured table, and the lww guard follows only lww
tables. A trigger created while DRC was down is not guarded at start (left undone).

The triggers of pt-online-schema-change (``pt_osc_<db>_<t>_ins/upd/del``) are left unguarded
where this datacenter's channels replay the tool's ALTER (``online_schema_change = "replay"``,
drc.core.osc_replay): the other datacenters never see the tool's shadow table, so the rows
channels apply here must fire them, like local writes, to reach it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from drc.apply.sink import TargetSession
from drc.core import schema_objects
from drc.core.errors import DrcError
from drc.core.events import SchemaChange
from drc.core.online_schema_change import tool_trigger
from drc.mysql.sql import Statement

log = logging.getLogger(__name__)


class LocalTriggerGuard:
    """``submit`` is called from the capture loop and never blocks it: a worker thread runs
    the DDL. ``stats`` gets ``triggers_guarded`` and ``triggers_unguarded`` counted."""

    def __init__(
        self, session: Callable[[], TargetSession], stats: Any, *, replays_tools: bool = False
    ) -> None:
        self._session_factory = session
        self._replays_tools = replays_tools  # leave the tool's triggers unguarded
        self._stats = stats
        self._queue: queue.Queue[SchemaChange | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, change: SchemaChange) -> None:
        found = schema_objects.parse(change.statement, change.schema)
        if found is None or found.kind != schema_objects.TRIGGER or found.action != "create":
            return
        if schema_objects.is_guarded(change.statement, found):
            return
        if self._replays_tools and tool_trigger(found.schema, found.name) is not None:
            log.info("trigger %s.%s is an online schema change tool's: left unguarded "
                     "(online_schema_change = \"replay\")", found.schema, found.name)  # fmt: skip
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="drc-trigger-guard", daemon=True
                )
                self._thread.start()
        self._queue.put(change)

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=30)

    def _run(self) -> None:
        session = self._session_factory()
        try:
            while (change := self._queue.get()) is not None:
                self._guard(session, change)
        finally:
            session.close()

    def _guard(self, session: TargetSession, change: SchemaChange) -> None:
        found = schema_objects.parse(change.statement, change.schema)
        assert found is not None and found.body_start is not None
        try:
            body = change.statement[found.body_start :]
            if not _still_defined(session, found.schema, found.name, body):
                return
            guarded = schema_objects.or_replace(
                schema_objects.guard_trigger(change.statement, found)
            )
            with session.ddl_session(f"guarding trigger {found.schema}.{found.name}") as ddl:
                ddl.run(SchemaChange(change.schema, guarded))
            self._stats.triggers_guarded += 1
            log.info("trigger %s.%s created here: DRC's guard added", found.schema, found.name)
        except DrcError as exc:
            session.close()
            self._stats.triggers_unguarded += 1
            log.warning(
                "trigger %s.%s created here could not be given DRC's guard (%s): rows that "
                "channels apply to its table fire it a second time. Grant the apply user "
                "TRIGGER (and SET USER for another definer), or write the body as "
                "IF @drc_apply IS NULL THEN ... END IF",
                found.schema, found.name, exc,
            )  # fmt: skip


def _still_defined(session: TargetSession, schema: str, name: str, body: str) -> bool:
    """Whether the server's trigger still has the body the captured statement gave it."""
    rows = session.query(
        Statement(
            "SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS "
            "WHERE TRIGGER_SCHEMA = %s AND TRIGGER_NAME = %s",
            (schema, name),
        ),
        f"reading trigger {schema}.{name}",
    )
    session.commit()
    wanted = body.rstrip().rstrip(";").rstrip()
    return bool(rows) and str(rows[0][0]).rstrip().rstrip(";").rstrip() == wanted
