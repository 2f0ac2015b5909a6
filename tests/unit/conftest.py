"""Fixtures shared by the unit tests (helpers and fakes are in tests/support/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drc.eventbuffer import EventBuffer


@pytest.fixture
def buffer(tmp_path: Path) -> Iterator[EventBuffer]:
    """An empty event buffer in tmp_path/buf, closed after the test (a module that needs
    records in it defines its own ``buffer``)."""
    with EventBuffer.open(tmp_path / "buf") as buf:
        yield buf
