"""Shared pytest setup. Fixtures of one tier live in tests/unit/conftest.py and
tests/integration/conftest.py; helpers, fakes and builders that test modules import, in
tests/support/."""

from __future__ import annotations

import pytest
from hypothesis import settings

# The helpers' asserts report like the tests' own (before any test module imports them).
pytest.register_assert_rewrite("tests.support")

# Hypothesis's per-example deadline is a timing assert: on a loaded 2-core host an example can
# take 0.5 s without anything being wrong. Properties are checked, not speed.
settings.register_profile("drc", deadline=None)
settings.load_profile("drc")
