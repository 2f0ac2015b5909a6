"""The snapshot's pure parts: rows rendered by the origin, the recorded plan, shapes."""

from __future__ import annotations

import datetime as dt
import decimal

from drc.core.chunks import Chunk
from drc.core.scn import SCN
from drc.snapshot import journal, rows
from drc.snapshot.rows import Column
from drc.snapshot.tables import Shape, shape


def test_each_type_gets_a_literal_that_reads_back_exactly():
    assert rows.literal(Column("b", "varbinary")) == "IFNULL(CONCAT('X''', HEX(`b`), ''''), 'NULL')"
    assert rows.literal(Column("f", "float")) == "IFNULL((`f` + 0e0), 'NULL')"
    assert rows.literal(Column("n", "bigint")) == "IFNULL(`n`, 'NULL')"
    assert rows.literal(Column("x", "bit")) == "IFNULL(CAST(`x` AS UNSIGNED), 'NULL')"
    assert (
        rows.literal(Column("t", "datetime")) == "IFNULL(QUOTE(CONVERT(`t` USING utf8mb4)), 'NULL')"
    )


def test_names_are_quoted_for_each_kind_of_statement():
    cols = [Column("a`b", "int"), Column("50%", "text"), Column("g", "int", generated=True)]
    kept = rows.copied(cols)
    assert [c.name for c in kept] == ["a`b", "50%"], "generated columns are left out"
    select = rows.chunk_select("d", "t%", kept, "`a``b` > %s")
    assert "`a``b`" in select and "`50%%`" in select and "FROM `d`.`t%%`" in select
    assert rows.insert_prefix("d", "t%", kept) == "INSERT INTO `d`.`t%` (`a``b`, `50%`) VALUES "


def test_a_recorded_plan_reads_back_with_its_exact_bounds():
    lower = (7, "b", decimal.Decimal("1.50"), dt.datetime(2024, 1, 2, 3, 4, 5, 6))
    chunk = Chunk("d", "t", ("a", "b", "c", "d"), lower, None, 1000, 3)
    planned = journal.plan_chunk("ch", chunk)
    row = (3, planned.params[4], planned.params[5], planned.params[6], 1000, None, None)
    (found,) = journal.parse_chunks("d", "t", [row])
    assert found.chunk == chunk and not found.done
    done = journal.chunk_done("ch", chunk, 12, SCN(1, 1, 2, 300))
    assert done.params[:2] == (12, "1:1:2:300")
    assert "`copied_rows` IS NULL" in done.sql, "a chunk is marked copied once"


def test_shapes_name_what_differs():
    origin = shape([("id", "int(11)", 1), ("v", "int(11)", None)])
    assert origin == Shape((("id", "int(11)"), ("v", "int(11)")), ("id",))
    assert origin.difference(origin) is None
    wider = shape([("id", "int(11)", 1), ("v", "bigint(20)", None)])
    assert origin.difference(wider) == "column v is bigint(20) on the target, int(11) on the origin"
    assert "no column v" in str(origin.difference(shape([("id", "int(11)", 1)])))
    other_key = shape([("id", "int(11)", None), ("v", "int(11)", 1)])
    assert "primary key is (v) on the target" in str(origin.difference(other_key))
    assert shape([]) is None
