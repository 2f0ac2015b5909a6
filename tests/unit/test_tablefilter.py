from __future__ import annotations

import pytest

from drc.core.tablefilter import TableFilter, TableFilterError


def test_include_and_exclude_with_wildcards() -> None:
    f = TableFilter.build(["shop.*", "*.audit_?"], ["shop.tmp*"])
    assert f.matches("shop", "orders")
    assert not f.matches("shop", "tmp_1")
    assert f.matches("hr", "audit_1") and not f.matches("hr", "audit_10")
    assert not f.matches("hr", "people")


def test_no_patterns_match_everything_and_names_are_case_sensitive() -> None:
    assert TableFilter().matches("any", "thing")
    assert not TableFilter.build(["Shop.*"]).matches("shop", "t")


def test_comma_list_as_in_a_url() -> None:
    f = TableFilter.parse_list("db.t, db2.*")
    assert f.matches("db", "t") and f.matches("db2", "x") and not f.matches("db", "u")
    assert TableFilter.parse_list("").matches_everything


@pytest.mark.parametrize("bad", ["shop", "shop.", ".t", "a.b.c", " shop.t", ""])
def test_bad_patterns_are_refused_with_the_expected_form(bad: str) -> None:
    with pytest.raises(TableFilterError, match="db.table"):
        TableFilter.build([bad])


def test_a_list_of_only_commas_names_nothing() -> None:
    with pytest.raises(TableFilterError, match="names no table"):
        TableFilter.parse_list(" , ,")
