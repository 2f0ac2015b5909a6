"""One rule for matching a stored row (drc.mysql.sql.row_values), used by every lookup.

A FLOAT column holds a single; the captured value is the shortest decimal naming it (0.1 for
0.1f), whose double is another number, so every lookup binds a FLOAT value as the double of its
single, and DOUBLE and DECIMAL values as they are. Issue 24 (4): keyed deletes, updates and the
conflict probes bound the shortest decimal and never found a row with a FLOAT key.
"""

from __future__ import annotations

import random
import struct
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from drc.apply.plan import Delete, Planner, Update
from drc.conflicts import tombstones
from drc.conflicts.engine import ConflictEngine
from drc.conflicts.policies import Policies, TablePolicy
from drc.conflicts.probes import Probe, ProbePlan, observe
from drc.conflicts.rules import Ranks
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.core.target_table import TargetTable
from drc.core.values import shortest_single, single_precision
from drc.mysql import sql
from drc.verify import recheck, repair
from drc.verify.compare import TableSpec

# captured value (the shortest decimal naming the single) -> the double the FLOAT holds
FLOATS = {
    0.1: 0.10000000149011612,
    1e-38: 9.999999350456404e-39,  # a denormal single
    0.33333334: 0.3333333432674408,  # 1/3
    3.4028235e38: 3.4028234663852886e38,  # the largest single
    -3.4028235e38: -3.4028234663852886e38,
    1e-45: 1.401298464324817e-45,  # the smallest denormal
    1.1754944e-38: 1.1754943508222875e-38,  # the smallest normal
    0.7: 0.699999988079071,  # a single below its shortest decimal
    0.2: 0.20000000298023224,
    1.0: 1.0,
}
DOUBLES = [0.1, 1 / 3, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, -0.0, 1e-38]
DECIMALS = [Decimal("0.1000000000"), Decimal("-0E-10"), Decimal("99999999.9999999999")]

FLOAT_KEY = TargetTable("db", "fk", ("id", "f", "v"), ("id", "f"), frozenset({"f"}))
ALONE = TargetTable("db", "fa", ("F", "v"), ("F",), frozenset({"f"}))


@pytest.mark.parametrize(("captured", "held"), FLOATS.items())
def test_a_float_is_bound_as_the_double_of_its_single(captured: float, held: float) -> None:
    assert sql.row_values(["f"], [captured], frozenset({"f"})) == (held,)
    assert sql.row_values(["f"], [held], frozenset({"f"})) == (held,)  # read back: unchanged


def test_negative_zero_keeps_its_sign_and_null_stays_null() -> None:
    [zero] = sql.row_values(["f"], [-0.0], frozenset({"f"}))
    assert zero == 0.0 and struct.pack("<d", zero) == struct.pack("<d", -0.0)
    assert sql.row_values(["f"], [None], frozenset({"f"})) == (None,)


def test_a_value_past_the_largest_single_matches_the_largest_as_the_server_stores_it() -> None:
    assert single_precision(1e39) == 3.4028234663852886e38
    assert single_precision(-1e300) == -3.4028234663852886e38


@pytest.mark.parametrize("value", [*DOUBLES, *DECIMALS])
def test_double_and_decimal_values_are_bound_as_they_are(value: Any) -> None:
    bound = sql.row_values(["d"], [value], frozenset({"f"}))
    assert bound == (value,) and type(bound[0]) is type(value)
    assert str(bound[0]) == str(value)  # digits and exponent kept (Decimal), -0.0 kept


def test_only_columns_named_float_by_the_target_are_bound_as_singles() -> None:
    floats = sql.float_columns(["ID", "F", "D", "M"], ["int", "FLOAT", "double", "decimal"])
    assert floats == frozenset({"f"})
    assert sql.row_values(["ID", "F", "D", "M"], [1, 0.1, 0.1, Decimal("0.1")], floats) == (
        1, 0.10000000149011612, 0.1, Decimal("0.1"))  # fmt: skip


# ---------------------------------------------------------------- the captured form, read back


@pytest.mark.parametrize(("captured", "held"), FLOATS.items())
def test_a_float_read_back_as_a_double_is_the_captured_value(captured: float, held: float) -> None:
    assert shortest_single(held) == captured
    assert sql.read_values(["id", "F"], [1, held], frozenset({"f"})) == (1, captured)


def test_the_captured_form_is_the_capture_s_for_any_single() -> None:
    # drc.replicator.binlog.values.float32_text: float(str(np.float32(value)))
    rng = random.Random(24)
    singles = [2.0**e * m for e in range(-149, 128) for m in (1.0, 1 + 2**-23, 2 - 2**-23)]
    singles += [
        struct.unpack("<f", struct.pack("<I", rng.getrandbits(31)))[0] for _ in range(20000)
    ]
    for value in singles:
        if value > 3.4028234663852886e38 or value != value:
            continue
        for signed in (value, -value):
            assert shortest_single(signed) == float(str(np.float32(signed))), signed


def test_float_columns_are_read_as_doubles_under_their_own_names() -> None:
    assert sql.read_columns(["id", "F", "d"], frozenset({"f"})) == ("`id`, (`F` + 0e0) AS `F`, `d`")
    assert sql.read_column("F", frozenset({"f"})) == "(`F` + 0e0)"
    assert sql.read_columns(["id", "d"], frozenset()) == "`id`, `d`"


# ---------------------------------------------------------------- every lookup uses it


def _key(table: TargetTable, *values: Any) -> tuple[Any, ...]:
    return sql.row_values(table.primary_key, values, table.float_columns)


def test_keyed_deletes_and_updates_bind_float_keys_as_singles() -> None:
    planner = Planner()
    deletes = [
        RowChange("db", "fk", Op.DELETE, {"id": 1, "f": f, "v": 2}, None) for f in (0.1, 1e-38)
    ]
    writes = [w for c in deletes for w in planner.add(c, FLOAT_KEY)] + planner.finish()
    [delete] = writes
    assert isinstance(delete, Delete)
    assert delete.match.params == _key(FLOAT_KEY, 1, 0.1) + _key(FLOAT_KEY, 1, 1e-38)
    moved = RowChange("db", "fk", Op.UPDATE, {"id": 1, "f": 0.33333334, "v": 2},
                      {"id": 1, "f": 0.2, "v": 3})  # fmt: skip
    [update] = planner.add(moved, FLOAT_KEY)
    assert isinstance(update, Update) and update.delete_before is not None
    assert update.match.params == _key(FLOAT_KEY, 1, 0.33333334)
    assert update.delete_before.match.params == _key(FLOAT_KEY, 1, 0.33333334)
    assert update.statement().params[-2:] == (1, 0.3333333432674408)


def test_a_keyless_row_is_matched_by_the_same_rule() -> None:
    keyless = TargetTable("db", "log", ("a", "f"), (), frozenset({"f"}))
    planner = Planner(no_primary_key="match_whole_row")
    [delete] = planner.add(RowChange("db", "log", Op.DELETE, {"a": 1, "f": 0.1}, None), keyless)
    assert isinstance(delete, Delete)
    assert delete.match.params == (1, 0.10000000149011612)


def test_a_probe_finds_a_float_key_and_its_tombstone_by_the_same_rule() -> None:
    image = {"id": 1, "f": 0.1, "v": 2}
    select, stone = Probe(FLOAT_KEY, (1, 0.1), (image,), tombstone=True).statements()
    assert select.params == (1, 0.10000000149011612, 2) + _key(FLOAT_KEY, 1, 0.1)
    assert "(`f` + 0e0) AS `f`" in select.sql  # read back exactly (not 6 digits of text)
    assert stone.params == _key(FLOAT_KEY, 1, 0.1)
    assert tombstones.lookup("db", "fa", ["F"], [1e-38], ALONE.float_columns).params == (
        9.999999350456404e-39,)  # fmt: skip


def test_batched_probes_find_float_keys_by_the_same_rule() -> None:
    probes = [
        Probe(ALONE, (f,), ({"F": f, "v": 1},), tombstone=True) for f in (0.1, 1e-38, 0.33333334)
    ]
    select, stones = ProbePlan(probes).statements
    held = [FLOATS[f] for f in (0.1, 1e-38, 0.33333334)]
    assert select.sql.endswith("WHERE `F` IN (%s, %s, %s) FOR UPDATE")
    assert select.params[-3:] == tuple(held)
    assert all(value in select.params[:-3] for value in held)  # each CASE WHEN branch
    assert 0.1 not in select.params and 0.1 not in stones.params
    assert stones.params[-3:] == tuple(held)


def test_a_probed_float_key_reads_back_in_the_captured_form() -> None:
    probe = Probe(FLOAT_KEY, (1, 0.33333334), ({"id": 1, "f": 0.33333334, "v": 2},), False)
    names = ["flag", "id", "f", "v"]
    seen = observe(probe, [(names, [(1, 1, 0.3333333432674408, 2)])])
    assert seen.row == {"id": 1, "f": 0.33333334, "v": 2} and seen.same == (True,)
    [batched] = ProbePlan([probe]).observe([(["drc_answer", *names[1:]],
                                             [(1024, 1, 0.3333333432674408, 2)])])  # fmt: skip
    assert batched.row == seen.row and batched.same == (True,)


def _resolver_engine(returned_f: float) -> ConflictEngine:
    def keep_the_local_row(local: Any, before: Any, after: Any, context: Any) -> Any:
        return {**local, "f": returned_f}

    policy = TablePolicy("resolver", None, keep_the_local_row, "tests:keep_the_local_row")
    return ConflictEngine(
        Policies([("db.fk", policy)]), Ranks(["dc1", "dc2"]), channel="c", origin="dc2",
        datacenter="dc1", tables=lambda schema, table: FLOAT_KEY,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("returned_f", "decision"), [(0.33333334, "local"), (0.3333333432674408, "custom")]
)
def test_a_resolver_keeping_a_float_key_keeps_the_key(returned_f: float, decision: str) -> None:
    before, after = {"id": 1, "f": 0.33333334, "v": 1}, {"id": 1, "f": 0.33333334, "v": 2}
    change = RowChange("db", "fk", Op.UPDATE, before, after)
    prepared = _resolver_engine(returned_f).prepare([Transaction(SCN(1, 2, 3, 4), 2, None, 1,
                                                                 (change,))])  # fmt: skip
    [probe] = prepared.probes
    local = [(0, 0, 1, 0.3333333432674408, 9)]  # another row: an update-update conflict
    resolution = prepared.resolve([observe(probe, [(["a", "b", "id", "f", "v"], local)])])
    assert [(e.kind, e.decision) for e in resolution.entries] == [("update-update", decision)]
    assert resolution.entries[0].local_row == {"id": 1, "f": 0.33333334, "v": 9}


# ---------------------------------------------------------------- verify


class _Conn:
    """Records what verify asks a server; answers with no rows."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[Any, ...]]] = []

    def cursor(self) -> _Conn:
        return self

    def __enter__(self) -> _Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, text: str, params: tuple[Any, ...]) -> int:
        self.asked.append((text, params))
        return 0

    def fetchall(self) -> list[tuple[Any, ...]]:
        return []


SPEC = TableSpec(("db", "fk"), ("db", "fk"), ("id", "f", "d", "m", "v"),
                 ("int", "float", "double", "decimal", "int"), ("id", "f", "d", "m"))  # fmt: skip


def test_verify_reads_float_keys_exactly_and_looks_them_up_by_the_same_rule() -> None:
    assert SPEC.quoted_key() == ["`id`", "(`f` + 0e0)", "`d`", "`m`"]
    conn = _Conn()
    key = (1, 0.10000000149011612, 0.1, Decimal("0.10"))  # as verify read it
    recheck._rows(conn, SPEC, "`db`.`fk`", [key])
    repair.tombstone_of(conn, ("db", "fk"), SPEC.key, key, SPEC.floats)
    [(rows, bound), (_stone, stone_bound)] = conn.asked
    assert rows.startswith("SELECT `id`, (`f` + 0e0) AS `f`, `d`, `m`, `v` FROM")
    assert bound == stone_bound == sql.row_values(SPEC.key, key, SPEC.floats) == key
    captured = (1, 0.1, 0.1, Decimal("0.10"))
    assert sql.row_values(SPEC.key, captured, SPEC.floats) == key
