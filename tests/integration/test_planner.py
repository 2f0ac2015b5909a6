"""The partition planner on a real server: every row in exactly one chunk, chunks about even,
composite and string keys, a keyless table as one chunk."""

from __future__ import annotations

from typing import Any

import pytest

from drc.bulk.planner import chunk_where, list_tables, plan_table
from drc.core.tablefilter import TableFilter
from drc.mysql import sql
from drc.sandbox.sandbox import ServerInfo
from tests.support.servers import connect, fresh_database

pytestmark = pytest.mark.integration

DB = "planner_t"


@pytest.fixture(scope="module")
def conn(dc1: ServerInfo) -> Any:
    fresh_database(dc1, DB,
        f"CREATE TABLE {DB}.dense (id BIGINT PRIMARY KEY, v INT)",
        f"CREATE TABLE {DB}.sparse (id INT PRIMARY KEY, v INT)",
        f"CREATE TABLE {DB}.pair (a VARCHAR(10), b INT, v INT, PRIMARY KEY (a, b))",
        f"CREATE TABLE {DB}.uniq (code CHAR(8) NOT NULL, v INT, UNIQUE KEY (code))",
        f"CREATE TABLE {DB}.keyless (v INT)",
        f"CREATE TABLE {DB}.floaty (f FLOAT PRIMARY KEY)",
    )  # fmt: skip
    c = connect(dc1, database=DB)
    with c.cursor() as cur:
        cur.execute(f"INSERT INTO {DB}.dense SELECT seq, seq FROM seq_1_to_5000")
        cur.execute(f"INSERT INTO {DB}.sparse SELECT seq * seq, seq FROM seq_1_to_3000")
        cur.execute(f"INSERT INTO {DB}.pair SELECT CONCAT('k', seq MOD 37), seq, 0 "
                    "FROM seq_1_to_4000")  # fmt: skip
        cur.execute(f"INSERT INTO {DB}.uniq SELECT LPAD(seq, 8, 'z'), seq FROM seq_1_to_2500")
        cur.execute(f"INSERT INTO {DB}.keyless SELECT seq FROM seq_1_to_100")
        cur.execute(f"ANALYZE TABLE {DB}.dense, {DB}.sparse, {DB}.pair, {DB}.uniq")
        cur.fetchall()
    yield c
    c.close()


def _chunk_counts(conn: Any, table: str, chunk_rows: int) -> tuple[list[int], int]:
    plan = plan_table(conn, DB, table, chunk_rows)
    counts = []
    with conn.cursor() as cur:
        for chunk in plan.chunks:
            where = chunk_where(chunk)
            cur.execute(f"SELECT COUNT(*) FROM {sql.table_name(DB, table)} WHERE {where.sql}",
                        where.params)  # fmt: skip
            counts.append(int(cur.fetchone()[0]))
        cur.execute(f"SELECT COUNT(*) FROM {sql.table_name(DB, table)}")
        total = int(cur.fetchone()[0])
    return counts, total


@pytest.mark.parametrize(("table", "chunk_rows"), [
    ("dense", 500), ("sparse", 400), ("pair", 300), ("uniq", 700)])  # fmt: skip
def test_every_row_falls_in_exactly_one_chunk_of_about_the_size_asked(
    conn: Any, table: str, chunk_rows: int
) -> None:
    counts, total = _chunk_counts(conn, table, chunk_rows)
    assert sum(counts) == total
    assert len(counts) > 1
    assert max(counts) <= chunk_rows * 1.5  # even: none much bigger than asked


def test_a_table_without_a_usable_key_is_one_chunk_with_a_note(conn: Any) -> None:
    plan = plan_table(conn, DB, "keyless", 10)
    assert len(plan.chunks) == 1 and plan.chunks[0].whole_table
    assert plan.note and "one chunk" in plan.note
    counts, total = _chunk_counts(conn, "keyless", 10)
    assert counts == [total]


def test_a_key_the_planner_cannot_split_is_named(conn: Any) -> None:
    plan = plan_table(conn, DB, "floaty", 10)
    assert len(plan.chunks) == 1 and "f (float)" in (plan.note or "")


def test_the_unique_not_null_key_is_used_without_a_primary_key(conn: Any) -> None:
    assert plan_table(conn, DB, "uniq", 1000).index_columns == ("code",)


def test_tables_are_listed_through_the_filter(conn: Any) -> None:
    found = list_tables(conn, TableFilter.build([f"{DB}.*"], [f"{DB}.floaty"]))
    assert found == [(DB, t) for t in ("dense", "keyless", "pair", "sparse", "uniq")]
