"""Shared pytest setup. Integration fixtures live in tests/integration/conftest.py."""

from __future__ import annotations

import os


def running_in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
