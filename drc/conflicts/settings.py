"""The [conflicts] section: how apply channels detect and resolve write conflicts.

A table entry is checked against its policy's declaration (drc.conflicts.policies): a known
name, and a column and resolver exactly where the policy takes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from drc.config_section import Section
from drc.config_urls import ApiUrl
from drc.conflicts.policies import POLICIES
from drc.core.tablefilter import TableFilter, TableFilterError


class ConflictTableConfig(Section):
    """The conflict policy of the tables matching ``table`` (target names, wildcards allowed)."""

    table: str
    policy: str  # a name of drc.conflicts.policies.POLICIES
    # The row's timestamp column, for the policies that take one. DRC then keeps it moving
    # forward and keeps tombstones, so deletes have a time too (drc.conflicts.tombstones).
    column: str | None = Field(None, min_length=1)
    resolver: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module:function
    # Counter columns: a change's difference is added on the other datacenters instead of its
    # value written (drc.conflicts.counters). Integer or DECIMAL, NOT NULL (checked when the
    # channel starts).
    delta_columns: tuple[str, ...] = ()

    @field_validator("policy", mode="before")
    @classmethod
    def _known(cls, name: Any) -> Any:
        # Worded as pydantic words a Literal, so the message lists every policy.
        if isinstance(name, str) and name in POLICIES:
            return name
        expected = _listed([repr(n) for n in POLICIES], "or")
        raise PydanticCustomError(
            "unknown_policy", "Input should be {expected}", {"expected": expected}
        )

    @model_validator(mode="after")
    def _complete(self) -> ConflictTableConfig:
        try:
            TableFilter.build([self.table])
        except TableFilterError as exc:
            raise ValueError(str(exc)) from exc
        policy = POLICIES[self.policy]
        if policy.column == "required" and self.column is None:
            raise ValueError(
                f"{self.table}: policy {policy.name} needs column = the timestamp column"
            )
        if policy.resolver == "required" and self.resolver is None:
            raise ValueError(
                f"{self.table}: policy {policy.name} needs resolver = 'module:function'"
            )
        if self.column is not None and policy.column == "unused":
            users = [p.name for p in POLICIES.values() if p.column != "unused"]
            raise ValueError(f"{self.table}: column is only used by {_policies(users)}")
        if self.resolver is not None and policy.resolver == "unused":
            users = [p.name for p in POLICIES.values() if p.resolver != "unused"]
            raise ValueError(f"{self.table}: resolver is only used by {_policies(users)}")
        if self.delta_columns:
            self._check_counters(policy.counters)
        return self

    def _check_counters(self, taken: bool) -> None:
        if not taken:
            users = [p.name for p in POLICIES.values() if p.counters]
            raise ValueError(f"{self.table}: delta_columns is only used by {_policies(users)}")
        folded = [c.lower() for c in self.delta_columns]
        if any(not c.strip() for c in folded):
            raise ValueError(f"{self.table}: delta_columns names an empty column")
        if len(set(folded)) != len(folded):
            raise ValueError(f"{self.table}: delta_columns names a column twice")
        if self.column is not None and self.column.lower() in folded:
            raise ValueError(
                f"{self.table}: {self.column} is the timestamp column; it cannot be a counter "
                "in delta_columns too"
            )


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
        return any(POLICIES[t.policy].detects for t in self.tables)

    @property
    def by_version(self) -> bool:
        """Whether a table's policy decides by version (lww), so by ``priority`` on ties."""
        return any(POLICIES[t.policy].by_version for t in self.tables)


def _policies(names: Sequence[str]) -> str:
    return f"policy {names[0]}" if len(names) == 1 else f"policies {_listed(names, 'and')}"


def _listed(words: Sequence[str], last: str) -> str:
    """``a, b and c`` (with ``last`` = "and")."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"
