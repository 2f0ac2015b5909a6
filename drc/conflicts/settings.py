"""The [conflicts] section: how apply channels detect and resolve write conflicts."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from drc.config_section import Section
from drc.config_urls import ApiUrl
from drc.core.tablefilter import TableFilter, TableFilterError

ConflictPolicyName = Literal["lww", "resolver", "overwrite", "keep", "off"]


class ConflictTableConfig(Section):
    """The conflict policy of the tables matching ``table`` (target names, wildcards allowed)."""

    table: str
    policy: ConflictPolicyName
    # lww (required) or resolver (optional): the row's timestamp column. DRC then keeps it moving
    # forward and keeps tombstones, so deletes have a time too (drc.conflicts.tombstones).
    column: str | None = Field(None, min_length=1)
    resolver: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module:function

    @model_validator(mode="after")
    def _complete(self) -> ConflictTableConfig:
        try:
            TableFilter.build([self.table])
        except TableFilterError as exc:
            raise ValueError(str(exc)) from exc
        if self.policy == "lww" and self.column is None:
            raise ValueError(f"{self.table}: policy lww needs column = the timestamp column")
        if self.policy == "resolver" and self.resolver is None:
            raise ValueError(f"{self.table}: policy resolver needs resolver = 'module:function'")
        if self.column is not None and self.policy not in ("lww", "resolver"):
            raise ValueError(f"{self.table}: column is only used by policies lww and resolver")
        if self.resolver is not None and self.policy != "resolver":
            raise ValueError(f"{self.table}: resolver is only used by policy resolver")
        return self


class ConflictsConfig(Section):
    """How apply channels detect and resolve write conflicts (see drc.conflicts).

    Every datacenter must be given the same policies and priority, or the sides decide
    differently and never converge.
    """

    priority: tuple[str, ...] = ()  # datacenters, first wins a lww tie on equal timestamps
    tombstone_retention_hours: float = Field(168, gt=0)
    log_retention_days: float = Field(90, gt=0)  # how long drc.conflicts keeps an entry
    tables: tuple[ConflictTableConfig, ...] = ()  # first matching entry wins
    # API URLs of this datacenter's own replicator, read by the lww guard (drc.apply.lww_guard)
    # when it runs on another host than the replicator (default: the [api] address).
    local_api: tuple[ApiUrl, ...] = ()

    @property
    def active(self) -> bool:
        return any(t.policy != "off" for t in self.tables)
