"""Transformation hooks the integration tests configure as ``tests.integration.transforms:NAME``."""

from __future__ import annotations

import dataclasses
from typing import Any

from drc.core.events import Op, RowChange


def shout_and_audit(change: RowChange) -> Any:
    """Upper-cases ``v``, drops rows whose v starts with "secret", and writes one audit row per
    insert into the ``audit`` table of the same database."""
    image = change.after if change.after is not None else change.before
    assert image is not None
    if str(image.get("v", "")).startswith("secret"):
        return None
    loud = dataclasses.replace(
        change,
        after=None if change.after is None else {**change.after, "v": change.after["v"].upper()},
    )
    if change.op is not Op.INSERT:
        return loud
    audit = RowChange(change.schema, "audit", Op.INSERT, None, {"id": image["id"], "note": "seen"})
    return [loud, audit]


def broken(change: RowChange) -> Any:
    image = change.after or change.before or {}
    if image.get("v") == "boom":
        raise ValueError("cannot handle boom")
    return change
