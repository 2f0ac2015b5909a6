"""Command-line tools some tests run, found on the PATH or the test skipped (failed under CI)."""

from __future__ import annotations

import os
import shutil

import pytest


def running_in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_tool(name: str, package: str) -> str:
    """The path of a command-line tool a test runs; a missing one fails under CI (make setup
    installs it), and skips elsewhere, naming the Debian package to install."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not found: install the Debian package {package} (make setup does)"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def require_compiled_build() -> None:
    """The compiled hot path's build (drc.native) a test compares against the pure modules; a
    missing or stale one fails under CI (make setup builds it), and skips elsewhere."""
    from drc import native

    files, reason = native.built_files()
    if files is None:
        message = f"compiled modules: {reason}"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
