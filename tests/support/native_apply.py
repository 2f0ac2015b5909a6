"""What the compiled and the pure apply side must agree on (tests/unit/test_native):
``python -m tests.support.native_apply`` (PYTHONHASHSEED fixed) prints, as JSON, whether this
process runs the compiled modules and a digest of every output below.

A generated workload (a seeded generator, so both processes draw the same one) of row changes
with every value type DRC carries (drc.core.values: ints to 2**64 - 1, text with quotes,
backslashes, ``%`` and 4-byte characters, bytes, DECIMALs, FLOAT and DOUBLE values, dates,
naive and aware datetimes, TIME, zero dates, BIT, SET, JSON documents) on tables of every kind
the planner tells apart (one integer key, a composite key of text and int with a FLOAT column,
UNIQUE secondary keys, triggers or foreign keys, no primary key), with key changes and counter
updates, goes the way a channel takes it:

    records (drc.core.codec) -> decode_transaction -> filter chain with map_tables and
    map_columns (drc.apply.stages) -> ApplyEngine groups (drc.apply.engine, plan, shapes)
    -> each write's statement (drc.mysql.sql) -> its text with values written in
    (sql.render with pymysql's escaping, both backslash modes; sql.literal without a session)

and each write is also settled and run with its fallbacks (drc.apply.plan.settled, run) against
a scripted executor. The outputs are the statements' text and parameters, the rendered texts,
the effects, the statements the fallbacks ran, the writes after a pickle round trip, and the
errors (type and message) of changes a table cannot take."""

from __future__ import annotations

import datetime as dt
import pickle
import random
from decimal import Decimal
from typing import Any

from drc.apply import plan
from drc.apply.engine import ApplyEngine, KnownTables
from drc.apply.stages import Chain, Idempotency, KeepTables, MapNames, NameMap, SkipDrcOriginated
from drc.core import codec
from drc.core.events import CounterUpdate, Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.core.target_table import TargetTable
from drc.core.values import Bit, ZeroDate
from drc.mysql import sql
from drc.mysql.errors import DuplicateKey
from tests.support.native_digest import attempt, report

COLUMNS = ("id", "n", "s", "b", "d", "f", "g", "day", "at", "span", "z", "bit", "tags", "doc")
TABLES = {
    "keyed": TargetTable("tgt", "keyed", COLUMNS, ("id",), frozenset({"f"})),
    "composite": TargetTable("tgt", "composite", ("k", *COLUMNS), ("k", "id"), frozenset({"f"})),
    "unique": TargetTable("tgt", "unique", COLUMNS, ("id",), unique_keys=(("s",),)),
    "ordered": TargetTable("tgt", "ordered", COLUMNS, ("id",), keeps_order=True),
    "keyless": TargetTable("tgt", "keyless", COLUMNS, ()),
}
TEXTS = ["", "a", "O'Brien", "back\\slash", "100%", "%s", "ünïcødé", "𝄞 clef", "Ab ", "ab", "\n\t"]


def value(rng: random.Random, column: str) -> Any:
    if column != "id" and rng.random() < 0.1:
        return None
    pick: dict[str, Any] = {
        "n": lambda: rng.choice([0, -1, 2**63 - 1, -(2**63), 2**64 - 1, rng.randrange(10**6)]),
        "s": lambda: rng.choice(TEXTS),
        "b": lambda: rng.choice([b"", b"\x00\xff", b"'\\", bytes(range(8))]),
        "d": lambda: rng.choice(
            [Decimal("0.00"), Decimal("-12.50"), Decimal("1E-30"), Decimal("123456789.123")]
        ),
        "f": lambda: rng.choice([0.1, -0.0, 1.5, 3.4028234663852886e38, 1e-45]),
        "g": lambda: rng.choice([0.1, 2.5e-300, -7.0, 1e308]),
        "day": lambda: dt.date(rng.randrange(1, 9999), rng.randrange(1, 13), rng.randrange(1, 29)),
        "at": lambda: rng.choice(
            [
                dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
                dt.datetime(1970, 1, 1),
                dt.datetime(2024, 6, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
            ]
        ),
        "span": lambda: rng.choice(
            [dt.timedelta(hours=-838, minutes=-59), dt.timedelta(microseconds=1), dt.timedelta()]
        ),
        "z": lambda: rng.choice([ZeroDate("0000-00-00"), ZeroDate("2020-00-15 10:00:00.000001")]),
        "bit": lambda: Bit(rng.randrange(256), 8),
        "tags": lambda: frozenset(rng.sample(["a", "b", "c,d"[:1], "x"], rng.randrange(4))),
        "doc": lambda: rng.choice(['{"a": 1}', {"k": [1, "ü", None]}, [1.5, True], "plain"]),
    }
    if column in ("id", "k"):
        return rng.randrange(6) if column == "id" else rng.choice(["a", "A", "b ", "ß"])
    return pick[column]()


def image(rng: random.Random, columns: tuple[str, ...]) -> dict[str, Any]:
    return {f"src_{c}" if c == "s" else c: value(rng, c) for c in columns}


def change(rng: random.Random) -> RowChange:
    name = rng.choice(list(TABLES))
    columns = TABLES[name].columns
    op = rng.choice([Op.INSERT, Op.UPDATE, Op.DELETE])
    before = image(rng, columns) if op is not Op.INSERT else None
    after = image(rng, columns) if op is not Op.DELETE else None
    if before is not None and after is not None and rng.random() < 0.7:
        after["id"] = before["id"]  # most updates keep their key
    if op is Op.UPDATE and name == "keyed" and rng.random() < 0.2:
        assert after is not None
        assigned = tuple(c for c in after if c not in ("id", "n", "f"))
        return CounterUpdate(
            "src", name, op, before, after, added=(("n", 3),), assigned=assigned, kept=("f",)
        )
    return RowChange("src", name, op, before, after)


def transactions(seed: int, count: int) -> list[Transaction]:
    rng = random.Random(seed)
    out = []
    for n in range(1, count + 1):
        changes = tuple(change(rng) for _ in range(rng.randrange(1, 12)))
        scn = SCN(1, 1, n * 100, n)
        out.append(Transaction(scn, 1, f"0-1-{n}", 1_700_000_000 + n, changes))
    return out


class Script:
    """An executor that answers as a target might: affected rows by a fixed rule, a duplicate
    key now and then; records what it was asked to run."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ran: list[Any] = []

    def __call__(self, statement: sql.Statement) -> int:
        self.ran.append(statement)
        roll = self.rng.random()
        if roll < 0.1:
            raise DuplicateKey("1062 Duplicate entry")
        return 0 if roll < 0.3 else self.rng.randrange(1, 3)


def escapes() -> list[Any]:
    """pymysql's escaping with and without NO_BACKSLASH_ESCAPES, and none (no session)."""
    import pymysql
    from pymysql.constants import SERVER_STATUS

    found: list[Any] = [None]
    for status in (0, SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES):
        conn = pymysql.connections.Connection(defer_connect=True, charset="utf8mb4")
        conn.server_status = status
        found.append(conn.escape)
    return found


def outputs(seed: int = 26, count: int = 300, group: int = 25) -> list[Any]:
    records = [codec.encode_transaction(t) for t in transactions(seed, count)]
    decoded = [codec.decode_transaction(r)[0] for r in records]
    names = NameMap({"src.*": "tgt.*"}, {f"src.{t}": {"src_s": "s"} for t in TABLES})
    chain = Chain(
        [SkipDrcOriginated(), KeepTables(TableFilter()), MapNames(names), Idempotency(SCN.zero)]
    )
    kept = [k for t in decoded if (k := chain(t)) is not None]
    known = KnownTables({("tgt", name): table for name, table in TABLES.items()})
    found: list[Any] = [kept]
    script, rendering = Script(seed), escapes()
    for no_pk in ("refuse", "match_whole_row"):
        engine = ApplyEngine(known, no_primary_key=no_pk)  # type: ignore[arg-type]
        for start in range(0, len(kept), group):
            found.append(attempt(lambda s=start, e=engine: _group(e, kept[s : s + group])))
        for start in range(0, len(kept), group):
            try:
                writes = list(engine.decide(engine.prepare(kept[start : start + group])).writes)
            except Exception as exc:  # noqa: BLE001 - the failure is the output compared
                found.append(f"{type(exc).__name__}: {exc}")
                continue
            for write in writes:
                statement = write.statement()
                found.append((statement, pickle.loads(pickle.dumps(write)) == write))
                for escape in rendering:
                    found.append(attempt(lambda s=statement, e=escape: _rendered(s, e)))
                found.append(plan.settled(write, script.rng.randrange(3)))
                found.append(attempt(lambda w=write: plan.run(w, script)))
    found.append(script.ran)
    missing = RowChange("tgt", "keyed", Op.INSERT, None, {"id": 1, "nope": 2})
    found.append(attempt(lambda: list(plan.Planner().add(missing, TABLES["keyed"]))))
    return found


def _rendered(statement: sql.Statement, escape: Any) -> str:
    """As a session renders it (sql.render), or without a session (sql.literal alone)."""
    if escape is None:
        return statement.sql % tuple([sql.literal(v) for v in statement.params])
    return sql.render(statement, escape)


def _group(engine: ApplyEngine, txns: list[Transaction]) -> Any:
    decision = engine.decide(engine.prepare(txns), lazy=True)
    writes = list(decision.writes)
    return writes, decision.counts


if __name__ == "__main__":
    report(outputs)
