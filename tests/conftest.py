"""Shared pytest setup. Integration fixtures live in tests/integration/conftest.py."""

from __future__ import annotations

import os

from hypothesis import settings

# Hypothesis's per-example deadline is a timing assert: on a loaded 2-core host an example can
# take 0.5 s without anything being wrong. Properties are checked, not speed.
settings.register_profile("drc", deadline=None)
settings.load_profile("drc")


def running_in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_tool(name: str, package: str) -> str:
    """The path of a command-line tool a test runs; a missing one fails under CI (make setup
    installs it), and skips elsewhere, naming the Debian package to install."""
    import shutil

    import pytest

    path = shutil.which(name)
    if path is None:
        message = f"{name} not found: install the Debian package {package} (make setup does)"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path
