"""Conflict resolvers the integration tests configure as ``tests.integration.resolvers:NAME``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Row = Mapping[str, Any]


def merge_max(local: Row | None, before: Row | None, after: Row | None, context: Any) -> Row | None:
    """A row beats a delete; two rows merge column by column (the larger n and the larger v).

    Symmetric, so both datacenters compute the same row whichever side they stand on.
    """
    if local is None or after is None:
        return after if local is None else local
    return {**local, "n": max(local["n"], after["n"]), "v": max(local["v"], after["v"])}


def broken(local: Row | None, before: Row | None, after: Row | None, context: Any) -> Row | None:
    raise RuntimeError(f"resolver bug on key {dict(context.key)}")


def newest(local: Row | None, before: Row | None, after: Row | None, context: Any) -> Row | None:
    """Last writer wins by updated_at, deletes included (the table has a timestamp column, so
    DRC reports when a delete happened); equal times go to a delete, then to the larger (v, n).
    Symmetric, so both sides agree."""
    mine = (local["updated_at"], 1, local["v"], local["n"]) if local else None
    if mine is None and context.local_deleted_at is not None:
        mine = (context.local_deleted_at, 2, "", 0)
    if after is not None:
        theirs = (after["updated_at"], 1, after["v"], after["n"])
    else:
        theirs = (context.incoming_deleted_at, 2, "", 0)
    if mine is None or theirs > mine:
        return after
    return local
