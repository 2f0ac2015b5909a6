"""What applying writes did (drc.apply.plan), counted. Pure.

A module of its own so that drc.apply.plan can be compiled (drc.native) while
drc.apply.stats.ApplyStats, a Python class, still extends it: a compiled class cannot be.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Effects:
    """What applying writes did: rows written and the idempotent fixes among them."""

    rows: int = 0
    duplicate_inserts: int = 0
    missing_updates: int = 0
    missing_deletes: int = 0
    conflicts: int = 0  # resolved in the same transaction (drc.conflicts)

    def add(self, other: Effects) -> None:
        self.rows += other.rows
        self.duplicate_inserts += other.duplicate_inserts
        self.missing_updates += other.missing_updates
        self.missing_deletes += other.missing_deletes
        self.conflicts += other.conflicts

    @property
    def fixes(self) -> int:
        return self.duplicate_inserts + self.missing_updates + self.missing_deletes
