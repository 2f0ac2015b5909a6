"""The lww guard: DRC's protection of a lww table on the datacenter where it is created.

The triggers of a table with a conflict timestamp column (drc.conflicts.tombstones) are made by
every apply channel into this datacenter: at its start, after each DDL it applies, and every
MAINTAIN_EVERY_S for tables created since. A table created HERE got them only at the next of
those, and a delete made here before that left no tombstone. The guard closes that gap.

It is an apply channel whose remote is this datacenter's OWN replicator (its pull API, loop
marker skipped), subscribed to the tables with a timestamp policy and their tombstone rows:

- at start, every matching table is checked and set up (as by any channel);
- a CREATE/ALTER/RENAME of a matching table captured here: the triggers are made at once
  (the statement itself already ran here and is not run again);
- a delete captured here WITHOUT its tombstone row in the same transaction (it ran before
  the triggers existed, or the target refuses them): the conflict engine is given that delete
  as if it came from a remote. Its time is derived exactly as every receiving channel derives
  it for the same delete (drc.conflicts.rules.derived_delete_stamp: the commit second, at least
  one step after the deleted row's time), the tombstone is written, and a row a remote
  update brought back meanwhile is decided by lww against it, as the remote sides decide.
  A delete that carries its tombstone row costs nothing more.

What the guard writes carries the apply session's marker and its checkpoint row (channel
``lww-guard``), so it never leaves the datacenter. With ``--role apply`` on another host it
reaches the replicator at ``conflicts.local_api`` (default: the [api] address).

Remaining window: from a table's CREATE until the guard has made its triggers (the capture
delay, milliseconds), an insert or update here is not kept moving forward in time, and a delete
is dated by its commit second (not NOW(6)): both sides still agree on every decision.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from collections.abc import Iterable
from typing import Any

from drc.apply.channel import ApplyChannel, ChannelParts
from drc.apply.group import Group
from drc.apply.service import build_channel, target_settings
from drc.config import DrcConfig
from drc.config_channels import ChannelConfig
from drc.config_replicator import ApiConfig
from drc.conflicts.tombstones import COL_SCHEMA, COL_TABLE, is_tombstone_table
from drc.core.events import Op, RowChange, Transaction
from drc.core.target_errors import MissingTableError
from drc.core.target_table import key_of

log = logging.getLogger(__name__)

GUARD_NAME = "lww-guard"
_ANY_ADDRESS = ("", "0.0.0.0", "::")


def local_api_url(api: ApiConfig) -> str:
    """This datacenter's pull API as seen from this host."""
    host = "127.0.0.1" if api.host in _ANY_ADDRESS else api.host
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a host name
    scheme = "https" if api.tls_certfile else "http"
    return f"{scheme}://{host}:{api.port}"


def guard_channel(config: DrcConfig, local_url: str | None = None) -> ChannelConfig | None:
    """The guard's channel config, or None when no table has a conflict timestamp column."""
    tables = tuple(t.table for t in config.conflicts.tables if t.column is not None)
    if not tables:
        return None
    remote = config.conflicts.local_api or (local_url or local_api_url(config.api),)
    tokens = config.api.secrets()
    return ChannelConfig.model_validate({
        "name": GUARD_NAME, "origin": config.datacenter.name, "remote": remote,
        "tables": tables, "token": tokens[0] if tokens else None, "max_commit_delay_ms": 0,
    })  # fmt: skip


def build_guard(config: DrcConfig, local_url: str | None = None) -> LwwGuard | None:
    channel = guard_channel(config, local_url)
    if channel is None:
        return None
    target = target_settings(config.target_or_source())
    guard = build_channel(
        channel, target, conflicts=config.conflicts, datacenter=config.datacenter.name,
        kind=LwwGuard,
    )  # fmt: skip
    assert isinstance(guard, LwwGuard)
    return guard


class LwwGuard(ApplyChannel):
    def __init__(self, parts: ChannelParts) -> None:
        super().__init__(parts)
        if self.conflicts is None:
            raise ValueError("the lww guard needs a [conflicts] section with a timestamp column")
        self._pending: list[RowChange] = []  # the kept changes of a transaction's fragments

    @property
    def derived(self) -> int:
        """Deletes captured here without a tombstone row, given a derived one."""
        return 0 if self.conflicts is None else self.conflicts.engine.fallback_stamps

    def _take(self, txn: Transaction, kept: Transaction | None, group: Group) -> None:
        """``kept``: what the filters left of ``txn``, captured here (a fragment's)."""
        if kept is not None and kept.ddl:
            self._follow_ddl(txn, group)
            return
        if kept is not None:
            self._pending.extend(kept.changes)
        if not txn.last_fragment:  # a tombstone row may sit in a later fragment
            return
        pending, self._pending = self._pending, []
        deletes = self._retrying(lambda: self._unstamped(pending))  # reads table definitions
        whole = dataclasses.replace(txn, changes=deletes, ddl=(), fragment=0, last_fragment=True)
        super()._take(whole, whole if deletes else None, group)  # filtered already

    def _follow_ddl(self, txn: Transaction, group: Group) -> None:
        """Make the triggers of a table created or altered here (the DDL already ran)."""
        assert self.conflicts is not None
        self._flush(group)  # earlier deletes are decided with the table as it was
        self.target.forget_tables()
        self._retrying(self.conflicts.refresh_tables)
        log.info("lww guard: DRC's triggers checked after local DDL at %s", txn.scn)
        group.finished(txn, wrote=False)
        self._flush(group, force=True)

    def _unstamped(self, changes: Iterable[RowChange]) -> tuple[RowChange, ...]:
        """The deletes of timed tables whose tombstone row is not among ``changes``."""
        changes = list(changes)
        stamped: set[tuple[str, str, tuple[Any, ...]]] = set()
        for change in changes:
            if is_tombstone_table(change.schema, change.table) and change.after is not None:
                schema, table = change.after[COL_SCHEMA], change.after[COL_TABLE]
                key = self._key(schema, table, change.after)
                if key is not None:
                    stamped.add((schema, table, key))
        out = []
        for change in changes:
            if change.op is not Op.DELETE or is_tombstone_table(change.schema, change.table):
                continue
            key = self._key(change.schema, change.table, change.before)
            if key is not None and (change.schema, change.table, key) not in stamped:
                out.append(change)
        return tuple(out)

    def _key(self, schema: str, table: str, image: Any) -> tuple[Any, ...] | None:
        """The key of ``image`` in a timed table (None: not one, or dropped since)."""
        assert self.conflicts is not None
        policy = self.conflicts.policies.get(schema, table)
        if policy is None or policy.column is None or image is None:
            return None
        try:
            return key_of(self.target.table(schema, table), image)
        except MissingTableError:
            return None  # dropped since: nothing left to protect
        except KeyError:
            return None  # the key changed since: the image does not carry it
