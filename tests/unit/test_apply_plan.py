"""Row changes -> grouped, idempotent writes (pure), and how their results are interpreted."""

from __future__ import annotations

import pytest

from drc.apply import plan
from drc.apply.plan import Delete, Insert, Planner, Update, Upsert
from drc.core.events import Op, RowChange
from drc.core.target_errors import MissingColumnError, NoPrimaryKeyError, TargetDivergedError
from drc.core.target_table import TargetTable
from drc.mysql import sql
from drc.mysql.errors import DuplicateKey

T = TargetTable("db", "t", ("id", "v"), ("id",))
U = TargetTable("db", "u", ("id", "v"), ("id",))
N = TargetTable("db", "n", ("a", "b"), ())


def ins(table: TargetTable, id_: int, v: str = "x") -> RowChange:
    return RowChange(table.schema, table.table, Op.INSERT, None, {"id": id_, "v": v})


def upd(table: TargetTable, id_: int, new_id: int | None = None) -> RowChange:
    after = {"id": id_ if new_id is None else new_id, "v": "new"}
    return RowChange(table.schema, table.table, Op.UPDATE, {"id": id_, "v": "old"}, after)


def dele(table: TargetTable, id_: int) -> RowChange:
    return RowChange(table.schema, table.table, Op.DELETE, {"id": id_, "v": "x"}, None)


def plan_all(changes: list[RowChange], planner: Planner | None = None) -> list[plan.Write]:
    planner = planner or Planner()
    tables = {"t": T, "u": U, "n": N}
    out: list[plan.Write] = []
    for change in changes:
        out += planner.add(change, tables[change.table])
    return out + planner.finish()


def shape(writes: list[plan.Write]) -> list[tuple[str, str, int]]:
    sizes = {Upsert: lambda w: len(w.rows), Delete: lambda w: w.count}
    return [(type(w).__name__, w.table.table, sizes.get(type(w), lambda w: 1)(w)) for w in writes]


def test_consecutive_inserts_into_one_table_become_one_upsert() -> None:
    writes = plan_all([ins(T, 1), ins(T, 2), ins(T, 3)])
    assert shape(writes) == [("Upsert", "t", 3)]
    assert writes[0].statement().params == (1, "x", 2, "x", 3, "x")


def test_an_insert_joins_its_batch_across_an_update_of_another_key() -> None:
    writes = plan_all([ins(T, 1), ins(T, 2), upd(T, 1), ins(T, 3), dele(T, 2), dele(T, 3)])
    assert shape(writes) == [("Upsert", "t", 3), ("Update", "t", 1), ("Delete", "t", 2)]
    assert writes[0].statement().params == (1, "x", 2, "x", 3, "x")


def test_writes_to_another_table_do_not_end_a_batch() -> None:
    writes = plan_all([ins(T, 1), ins(U, 1), ins(T, 2), dele(T, 1), dele(U, 1), dele(T, 2)])
    assert shape(writes) == [
        ("Upsert", "t", 2), ("Upsert", "u", 1), ("Delete", "t", 2), ("Delete", "u", 1),
    ]  # fmt: skip


def test_inserts_with_other_columns_do_not_share_a_statement() -> None:
    other = RowChange("db", "t", Op.INSERT, None, {"id": 9})
    assert shape(plan_all([ins(T, 1), other, ins(T, 2)])) == [
        ("Upsert", "t", 2), ("Upsert", "t", 1),
    ]  # fmt: skip


def test_runs_are_bounded_by_rows_and_bytes() -> None:
    assert shape(plan_all([ins(T, i) for i in range(5)], Planner(max_rows=2))) == [
        ("Upsert", "t", 2), ("Upsert", "t", 2), ("Upsert", "t", 1),
    ]  # fmt: skip
    big = [ins(T, i, "y" * 100) for i in range(3)]
    assert shape(plan_all(big, Planner(max_bytes=150))) == [("Upsert", "t", 2), ("Upsert", "t", 1)]


def test_deletes_are_grouped_by_key() -> None:
    writes = plan_all([dele(T, 1), dele(T, 2)])
    assert writes[0].statement().sql == "DELETE FROM `db`.`t` WHERE `id` IN (%s, %s)"


def test_update_matches_the_before_key_and_writes_the_whole_after_image() -> None:
    (write,) = plan_all([upd(T, 1, new_id=2)])
    assert isinstance(write, Update)
    statement = write.statement()
    assert statement.sql == "UPDATE `db`.`t` SET `id` = %s, `v` = %s WHERE `id` = %s"
    assert statement.params == (2, "new", 1)
    assert write.delete_before is not None and write.delete_before.statement().params == (1,)
    (same_key,) = plan_all([upd(T, 1)])
    assert same_key.delete_before is None


def test_key_columns_are_found_whatever_their_case_in_the_source() -> None:
    table = TargetTable("db", "t", ("ID", "v"), ("ID",))
    change = RowChange("db", "t", Op.DELETE, {"id": 4, "v": "x"}, None)
    planner = Planner()
    (write,) = planner.add(change, table) + planner.finish()
    assert write.statement().params == (4,)


def test_missing_column_error_names_table_and_column() -> None:
    change = RowChange("db", "t", Op.INSERT, None, {"id": 1, "v": "x", "extra": 2})
    with pytest.raises(MissingColumnError, match=r"db\.t has no column 'extra'"):
        Planner().add(change, T)


def test_table_without_primary_key_is_refused_by_default() -> None:
    change = RowChange("db", "n", Op.INSERT, None, {"a": 1, "b": 2})
    with pytest.raises(NoPrimaryKeyError, match=r"db\.n has no primary key"):
        Planner().add(change, N)


def test_table_without_primary_key_keeps_identical_rows_and_changes_one_at_a_time() -> None:
    planner = Planner("match_whole_row")
    before, after = {"a": 1, "b": None}, {"a": 1, "b": 5}
    writes = plan_all(
        [
            RowChange("db", "n", Op.INSERT, None, after),
            RowChange("db", "n", Op.INSERT, None, after),
            RowChange("db", "n", Op.UPDATE, before, after),
            RowChange("db", "n", Op.DELETE, after, None),
            RowChange("db", "n", Op.DELETE, after, None),
        ],
        planner,
    )
    assert [type(w) for w in writes] == [Insert, Update, Delete, Delete]
    insert = writes[0].statement()
    assert insert.sql == "INSERT INTO `db`.`n` (`a`, `b`) VALUES (%s, %s), (%s, %s)"
    assert insert.params == (1, 5, 1, 5)  # both identical rows inserted
    update = writes[1].statement()
    assert update.sql == (
        "UPDATE `db`.`n` SET `a` = %s, `b` = %s WHERE `a` <=> %s AND `b` <=> %s LIMIT 1"
    )
    assert update.params == (1, 5, 1, None)
    for delete in writes[2:]:
        assert delete.statement().sql.endswith("WHERE `a` <=> %s AND `b` <=> %s LIMIT 1")
    assert isinstance(writes[1].insert, Insert)


class Executor:
    """Answers statements with scripted affected-row counts (or DuplicateKey)."""

    def __init__(self, *answers: int | BaseException) -> None:
        self.answers = list(answers)
        self.ran: list[sql.Statement] = []

    def __call__(self, statement: sql.Statement) -> int:
        self.ran.append(statement)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_duplicate_insert_is_an_update_counted_when_the_row_differed() -> None:
    write = Upsert(T, ("id", "v"), ((1, "a"), (2, "b"), (3, "c")))
    assert plan.run(write, Executor(3)) == plan.Effects(3)  # all new, or identical
    assert plan.run(write, Executor(5)) == plan.Effects(3, duplicate_inserts=2)


def test_update_of_a_missing_row_inserts_the_after_image() -> None:
    (write,) = plan_all([upd(T, 1)])
    executor = Executor(0, 1)
    assert plan.run(write, executor) == plan.Effects(1, missing_updates=1)
    assert executor.ran[1].sql.startswith("INSERT INTO `db`.`t`")
    assert executor.ran[1].params == (1, "new")
    assert plan.run(write, Executor(1)) == plan.Effects(1)


def test_update_onto_a_key_another_row_holds_replaces_that_row() -> None:
    (write,) = plan_all([upd(T, 1, new_id=2)])
    executor = Executor(DuplicateKey("dup"), 1, 2)
    assert plan.run(write, executor) == plan.Effects(1, duplicate_inserts=1)
    assert [s.sql.split()[0] for s in executor.ran] == ["UPDATE", "DELETE", "INSERT"]
    with pytest.raises(DuplicateKey):
        plan.run(plan_all([upd(T, 1)])[0], Executor(DuplicateKey("dup")))


def test_delete_of_missing_rows_is_a_counted_no_op() -> None:
    write = plan_all([dele(T, 1), dele(T, 2), dele(T, 3)])[0]
    assert plan.run(write, Executor(1)) == plan.Effects(3, missing_deletes=2)


def test_keyless_insert_counts_every_row_and_stops_on_a_unique_key_clash() -> None:
    write = Insert(N, ("a", "b"), ((1, 2), (1, 2)))
    assert plan.run(write, Executor(2)) == plan.Effects(2)
    with pytest.raises(TargetDivergedError, match=r"db\.n has no primary key"):
        plan.run(write, Executor(DuplicateKey("dup")))


def test_keyless_update_of_a_missing_row_inserts_the_after_image() -> None:
    change = RowChange("db", "n", Op.UPDATE, {"a": 1, "b": 2}, {"a": 1, "b": 3})
    (write,) = plan_all([change], Planner("match_whole_row"))
    executor = Executor(0, 1)
    assert plan.run(write, executor) == plan.Effects(1, missing_updates=1)
    assert executor.ran[1].sql == "INSERT INTO `db`.`n` (`a`, `b`) VALUES (%s, %s)"


def test_effects_add_up() -> None:
    total = plan.Effects()
    total.add(plan.Effects(2, duplicate_inserts=1))
    total.add(plan.Effects(1, missing_updates=1, missing_deletes=3))
    assert total == plan.Effects(3, 1, 1, 3) and total.fixes == 5
