"""Set-up shared by the tests: helpers, fakes and builders that test modules import.

Test modules (``test_*.py``) import from here and never from each other
(tests/unit/test_architecture.py checks it); pytest rewrites the asserts of these modules too
(tests/conftest.py registers them).
"""
