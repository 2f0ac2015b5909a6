"""The conflict log's SQL and row encoding (drc.apply.conflict_log), without a server."""

from __future__ import annotations

import ast
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drc.conflicts import log
from drc.conflicts.log import ConflictEntry, StoredConflict
from drc.core.errors import UnsupportedValueError
from drc.core.target_errors import ApplyError, MissingTableError
from drc.core.values import Bit, ZeroDate
from drc.mysql.sql import Statement

UTC = dt.UTC


def entry(**changes: Any) -> ConflictEntry:
    fields: dict[str, Any] = {
        "channel": "from-dc2",
        "scn": "12:2:3:456",
        "origin": "dc2",
        "datacenter": "dc1",
        "schema": "shop",
        "table": "orders",
        "key": {"id": 7},
        "kind": "update-update",
        "policy": "lww",
        "decision": "incoming",
        "reason": "the incoming change's origin commit time is newer (it's later)",
        "local_row": {"id": 7, "qty": 1},
        "incoming_before": {"id": 7, "qty": 2},
        "incoming_after": {"id": 7, "qty": 3},
        "result_row": {"id": 7, "qty": 3},
        "origin_time": dt.datetime(2026, 11, 22, 9, 59, 59, 5, tzinfo=UTC),
    }
    fields.update(changes)
    return ConflictEntry(**fields)


class FakeSession:
    """Answers queries from canned rows and records what was asked."""

    def __init__(self, rows: list[tuple[Any, ...]] | None = None, error: Exception | None = None):
        self.rows = rows or []
        self.error = error
        self.asked: list[Statement] = []

    def query(self, statement: Statement, what: str) -> list[tuple[Any, ...]]:
        self.asked.append(statement)
        if self.error is not None:
            raise self.error
        return self.rows


def stored_row(e: ConflictEntry, id_: int, detected: dt.datetime) -> tuple[Any, ...]:
    """The tuple SELECT returns for ``e`` as insert() wrote it (what pymysql gives back)."""
    params = log.insert([e]).params
    return (id_, detected, *params)


# ---------------------------------------------------------------- insert


def test_insert_is_one_multi_row_statement_with_every_value_bound() -> None:
    entries = [entry(), entry(channel="we`ird%", key={"a": 1, "b": "x"}, kind="insert-insert")]
    statement = log.insert(entries)
    assert statement.sql.startswith("INSERT INTO `drc`.`conflicts` (`detected_at`, `channel`, ")
    assert statement.sql.count("(UTC_TIMESTAMP(6), ") == 2
    assert statement.sql.count("%s") == 2 * 16 == len(statement.params)
    assert "from-dc2" not in statement.sql and "it's" not in statement.sql  # values not inlined
    first, second = statement.params[:16], statement.params[16:]
    assert first[:4] == ("from-dc2", "dc2", "dc1", "12:2:3:456")
    assert first[4] == dt.datetime(2026, 11, 22, 9, 59, 59, 5)  # aware -> naive UTC
    assert (
        second[0] == "we`ird%" and second[7] == '{"a":1,"b":"x"}' and second[8] == "insert-insert"
    )
    statement.sql % statement.params  # a valid pymysql format string


def test_insert_quotes_identifiers() -> None:
    sql = log.insert([entry()]).sql
    columns = sql[sql.index("(") + 1 : sql.index(")")]
    assert all(c.strip().startswith("`") and c.strip().endswith("`") for c in columns.split(","))


def test_insert_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError):
        log.insert([])


def test_an_origin_time_given_in_another_zone_is_stored_in_utc() -> None:
    paris = dt.timezone(dt.timedelta(hours=1))
    params = log.insert([entry(origin_time=dt.datetime(2026, 1, 1, 11, 0, tzinfo=paris))]).params
    assert params[4] == dt.datetime(2026, 1, 1, 10, 0)
    assert log.insert([entry(origin_time=None)]).params[4] is None


@pytest.mark.parametrize(
    ("field", "value"), [("kind", "update-insert"), ("policy", "newest"), ("decision", "both")]
)
def test_an_unknown_kind_policy_or_decision_is_refused(field: str, value: str) -> None:
    with pytest.raises(ValueError, match=field):
        entry(**{field: value})


def test_create_statements_are_idempotent_and_define_the_indexes() -> None:
    database, table = log.create_statements()
    assert database == "CREATE DATABASE IF NOT EXISTS `drc`"
    assert table.startswith("CREATE TABLE IF NOT EXISTS `drc`.`conflicts`")
    for part in (
        "`id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT",
        "`detected_at` DATETIME(6) NOT NULL",
        "`local_row` MEDIUMTEXT NULL",
        "PRIMARY KEY (`id`)",
        "(`detected_at`)",
        "(`schema_name`, `table_name`, `id`)",
        "(`channel`, `id`)",
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    ):
        assert part in table


def test_the_module_is_pure() -> None:
    tree = ast.parse(Path(log.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "pymysql" for name in names)
    assert not names & {"drc.apply", "drc.apply.sink", "drc.apply.channel"}


# ---------------------------------------------------------------- row encoding

MIXED = {
    # DRC's decoded stream values
    "dec": Decimal("-12.3400"),
    "aware": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
    "zero": ZeroDate("0000-00-00"),
    "bits": Bit(5, 10),
    "members": frozenset({"b", "a"}),
    "tm": dt.timedelta(hours=-838, minutes=-59, seconds=-59),
    "doc": {"k": [1, "é"]},
    # pymysql's result values
    "naive": dt.datetime(2024, 1, 2, 3, 4, 5, 6),
    "day": dt.date(2024, 1, 2),
    "blob": b"\x00\xff'\"",
    "big": 2**64 - 1,
    "f": 0.1,
    "s": "🎉 '\"\\%",
    "null": None,
    "truth": True,
}


def test_rows_mixing_stream_and_driver_values_round_trip_exactly() -> None:
    text = log.encode_row(MIXED)
    assert text is not None
    back = log.decode_row(text)
    assert back == MIXED
    assert list(back or {}) == list(MIXED)  # column order kept
    assert all(type(back[k]) is type(v) for k, v in MIXED.items())  # type: ignore[index]


def test_driver_only_forms_become_the_stream_types() -> None:
    row = {"st": {"x", "y"}, "ba": bytearray(b"\x01"), "t": dt.time(1, 2, 3, 4)}
    assert log.decode_row(log.encode_row(row)) == {
        "st": frozenset({"x", "y"}),
        "ba": b"\x01",
        "t": dt.timedelta(hours=1, minutes=2, seconds=3, microseconds=4),
    }


def test_no_row_stays_none_and_an_unknown_type_names_the_column() -> None:
    assert log.encode_row(None) is None and log.decode_row(None) is None
    with pytest.raises(UnsupportedValueError, match="'odd'"):
        log.encode_row({"odd": object()})


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.one_of(
            st.none(),
            st.integers(-(2**63), 2**64 - 1),
            st.text(),
            st.binary(),
            st.decimals(allow_nan=False, allow_infinity=False),
            st.datetimes(),
            st.timedeltas(min_value=dt.timedelta(hours=-838), max_value=dt.timedelta(hours=838)),
            st.frozensets(st.text(min_size=1).filter(lambda s: "," not in s)),
        ),
        max_size=6,
    )
)
def test_encode_then_decode_is_identity(row: dict[str, Any]) -> None:
    assert log.decode_row(log.encode_row(row)) == row


# ---------------------------------------------------------------- reads


def test_list_filters_orders_newest_first_and_decodes() -> None:
    detected = dt.datetime(2026, 11, 22, 10, 0, 0, 123456)
    e = entry(local_row=MIXED, key={"a": 1, "b": b"\x00"})
    session = FakeSession([stored_row(e, 9, detected)])
    since = dt.datetime(2026, 11, 22, 11, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    found = log.list_conflicts(session, channel="from-dc2", table="shop.orders", since=since)
    (asked,) = session.asked
    assert "FROM `drc`.`conflicts` WHERE `detected_at` >= %s AND `channel` = %s" in asked.sql
    assert "`schema_name` = %s AND `table_name` = %s" in asked.sql
    assert asked.sql.endswith("ORDER BY `id` DESC LIMIT %s")
    assert asked.params == (dt.datetime(2026, 11, 22, 10, 0), "from-dc2", "shop", "orders", 50)
    (stored,) = found
    assert stored.id == 9 and stored.detected_at == detected.replace(tzinfo=UTC)
    assert stored.local_row == MIXED and stored.key == {"a": 1, "b": b"\x00"}
    assert stored.origin_time == e.origin_time
    assert isinstance(stored, ConflictEntry) and stored.reason == e.reason


def test_list_without_filters_and_with_a_table_pair() -> None:
    session = FakeSession()
    assert log.list_conflicts(session, limit=3) == []
    assert "WHERE" not in session.asked[0].sql and session.asked[0].params == (3,)
    log.list_conflicts(session, table=("my.db", "t"))
    assert session.asked[1].params == ("my.db", "t", 50)


def test_get_conflict_by_id() -> None:
    detected = dt.datetime(2026, 1, 1)
    session = FakeSession([stored_row(entry(), 4, detected)])
    found = log.get_conflict(session, 4)
    assert isinstance(found, StoredConflict) and found.id == 4
    assert session.asked[0].params == (4,)
    assert log.get_conflict(FakeSession(), 5) is None


def test_stats_groups_by_table_policy_decision_and_kind() -> None:
    session = FakeSession([("shop", "orders", "lww", "incoming", "update-update", 3)])
    (count,) = log.stats(session, since=dt.datetime(2026, 1, 1))
    assert count == log.ConflictCount("shop", "orders", "lww", "incoming", "update-update", 3)
    sql = session.asked[0].sql
    assert "COUNT(*)" in sql and "GROUP BY `schema_name`, `table_name`, `policy`, " in sql
    assert "WHERE `detected_at` >= %s" in sql


@pytest.mark.parametrize("code", [1146, 1049])
def test_a_missing_table_is_a_clear_error(code: int) -> None:
    session = FakeSession(error=ApplyError("target rejected listing conflicts", code))
    with pytest.raises(MissingTableError, match="no conflict has been recorded on this target"):
        log.list_conflicts(session)
    with pytest.raises(MissingTableError, match="created by an apply channel"):
        log.stats(session)


def test_other_target_errors_pass_through() -> None:
    session = FakeSession(error=ApplyError("access denied", 1142))
    with pytest.raises(ApplyError, match="access denied"):
        log.get_conflict(session, 1)


def test_purge_deletes_a_bounded_batch_of_entries_older_than_the_retention() -> None:
    statement = log.purge(older_than_days=1.5)
    assert statement.sql.startswith("DELETE FROM `drc`.`conflicts` WHERE `detected_at` < ")
    assert statement.sql.endswith(f"LIMIT {log.PURGE_BATCH}")
    assert statement.params == (129600,)
