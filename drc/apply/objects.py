"""Replaying a statement on a view, routine, trigger or event on the target.

Three rewrites, made on the statement as the source wrote it (the journal keeps the original):

Definer: kept as written when the target has that account. When it lacks it, the channel's
``definer = "user@host"`` becomes the definer instead; without one the channel stops with an
error naming the account (MariaDB itself would create the object with a note and leave it
failing at every use). Writing another account as definer needs the SET USER privilege.

Triggers: DRC writes rows through SQL, so a trigger fires for them, and the row DRC applies
already holds the trigger's effect from the source (an audit row it inserted arrives as a row
of its own). CREATE TRIGGER is therefore applied with its body wrapped in
``IF @drc_apply IS NULL THEN <body>; END IF``: it fires for local writes, never in DRC's apply
sessions (which set ``@drc_apply = 1``, like DRC's own tombstone triggers check). A body that
already starts with that guard is applied as written. On the datacenter where the trigger was
created, drc.apply.trigger_guard re-creates it with the same wrapper, so both sides end with
the same SHOW CREATE TRIGGER and neither fires it for rows DRC applies.

Events: ``ENABLE`` (or a CREATE EVENT without a status, which means ENABLE) is applied as
``DISABLE ON SLAVE``, as native replication does: the event runs only where it was created and
its writes replicate like any others, instead of running once per datacenter.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol

from drc.core import schema_objects
from drc.core.events import SchemaChange
from drc.core.statements import for_log
from drc.core.target_errors import ApplyError
from drc.mysql import sql

log = logging.getLogger(__name__)


class Accounts(Protocol):
    def account_exists(self, user: str, host: str) -> bool: ...


def prepared(change: SchemaChange, accounts: Accounts, definer: str, channel: str) -> SchemaChange:
    """The statement to run on the target for ``change``."""
    found = schema_objects.parse(change.statement, change.schema)
    if found is None:
        return change
    statement = _with_target_definer(change.statement, found, accounts, definer, channel)
    if found.kind == schema_objects.TRIGGER and found.action == "create":
        statement = schema_objects.guard_trigger(statement, found)
    if found.kind == schema_objects.EVENT and found.action in ("create", "alter"):
        statement = schema_objects.disable_event_on_replica(statement)
    if statement == change.statement:
        return change
    return dataclasses.replace(change, statement=statement)


def _with_target_definer(
    statement: str,
    found: schema_objects.SchemaObject,
    accounts: Accounts,
    definer: str,
    channel: str,
) -> str:
    if found.definer is None or found.definer[0].upper() == "CURRENT_USER":
        return statement
    user, host = found.definer[0], found.definer[1] or "%"
    if accounts.account_exists(user, host):
        return statement
    if definer:
        log.warning(
            "channel %s: definer %r@%r of %s %s.%s is not an account on the target; "
            "using %s", channel, user, host, found.kind, found.schema, found.name, definer,
        )  # fmt: skip
        quoted = sql.account(*schema_objects.split_account(definer))
        return schema_objects.with_definer(statement, found, quoted)
    raise ApplyError(
        f"channel {channel}: the definer {user!r}@{host!r} of {found.kind} "
        f"{found.schema}.{found.name} is not an account on the target ({for_log(statement)}): "
        'create that account on the target, or set definer = "user@host" in the channel\'s '
        "config to make an existing account the definer"
    )
