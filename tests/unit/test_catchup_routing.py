"""Routing of a span's changes to partitions: one key's changes together, keyless tables
whole, key moves split, tombstones with the key they date, stable across processes."""

from __future__ import annotations

import random
import subprocess
import sys
from decimal import Decimal

from drc.catchup.executor import batches
from drc.catchup.routing import NetKeys, Router, partition_of, route, transactions
from drc.core.events import Op, RowChange, Transaction
from drc.core.reduce import Change, Entry, Nets, op_of, reduce_changes
from drc.core.scn import SCN

KEYS = {("db", "t"): ("id",), ("db", "log"): ()}


def txn(pos: int, *changes: RowChange, fragment: int = 0) -> Transaction:
    return Transaction(SCN(1, 1, 1, pos), 1, None, pos, tuple(changes), fragment=fragment)


def ins(table: str, **row: object) -> RowChange:
    return RowChange("db", table, Op.INSERT, None, row)


def upd(before: dict[str, object], **after: object) -> RowChange:
    return RowChange("db", "t", Op.UPDATE, before, after)


def routed(partitions: int, *txns: Transaction) -> list[tuple[int, Entry]]:
    """Each partition's nets, as (partition, entry)."""
    router = Router(KEYS, partitions)
    for t in txns:
        route(t, router)
    return [(part, e) for part, nets in sorted(router.parts.items()) for e in nets.result()]


def test_every_change_of_a_key_goes_to_one_partition_and_keyless_tables_stay_whole() -> None:
    out = routed(
        7,
        txn(10, ins("t", id=1, v="a"), ins("log", v=1)),
        txn(20, upd({"id": 1, "v": "a"}, id=1, v="b"), ins("log", v=2)),
    )
    by_table: dict[str, set[int]] = {}
    for part, entry in out:
        by_table.setdefault(entry[4], set()).add(part)
    assert all(len(parts) == 1 for parts in by_table.values())
    logs = [entry for _, entry in out if entry[4] == "log"]
    assert [e[6] for e in logs] == [{"v": 1}, {"v": 2}], "keyless rows kept, in stream order"
    [(_, net)] = [item for item in out if item[1][4] == "t"]
    assert (op_of(net), net[6]) == (Op.INSERT, {"id": 1, "v": "b"}), "reduced per key"


def test_an_update_that_moves_the_key_is_routed_as_a_delete_and_an_insert() -> None:
    out = routed(1000, txn(10, upd({"id": 1, "v": "a"}, id=2, v="a")))
    ops = {(op_of(e), (e[6] or e[5])["id"]): part for part, e in out}
    assert ops == {
        (Op.DELETE, 1): partition_of(("db", "t", 1), 1000),
        (Op.INSERT, 2): partition_of(("db", "t", 2), 1000),
    }


def test_a_tombstone_row_goes_with_the_key_it_dates() -> None:
    tomb = RowChange("drc", "tomb_x_db_t", Op.INSERT, None,
                     {"id": 5, "drc$schema": "db", "drc$table": "t"})  # fmt: skip
    delete = RowChange("db", "t", Op.DELETE, {"id": 5, "v": "a"}, None)
    [(first, _), (second, _)] = routed(97, txn(10, delete, tomb))
    assert first == second


def test_partitions_are_the_same_in_another_process() -> None:
    key = ("db", "t", Decimal("1.50"), "é")
    code = (
        "from decimal import Decimal; from drc.catchup.routing import partition_of; "
        "print(partition_of(('db', 't', Decimal('1.50'), 'é'), 1009))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(other.stdout) == partition_of(key, 1009)


def test_reduced_changes_become_one_transaction_per_scn() -> None:
    a, b = SCN(1, 1, 1, 10), SCN(1, 1, 1, 20)
    changes = [
        Change(a, 5, ins("t", id=1)),
        Change(a, 5, ins("t", id=2)),
        Change(b, 6, ins("t", id=3)),
    ]
    entries = [[n, c.scn.to_bytes(), c.timestamp, "db", "t", None, c.change.after]
               for n, c in enumerate(changes)]  # fmt: skip
    out = list(transactions(entries))
    assert [(t.scn, t.timestamp, len(t.changes)) for t in out] == [(a, 5, 2), (b, 6, 1)]


def _history(rng: random.Random, count: int) -> list[Transaction]:
    """Valid random changes of a keyed and a keyless table (updates that move keys too)."""
    rows: dict[int, int] = {}
    out = []
    for pos in range(1, count + 1):
        key = rng.randint(1, 6)
        if key not in rows:
            rows[key] = rng.randint(0, 9)
            change = ins("t", id=key, v=rows[key])
        elif rng.random() < 0.3:
            change = RowChange("db", "t", Op.DELETE, {"id": key, "v": rows.pop(key)}, None)
        elif rng.random() < 0.2 and (free := [k for k in range(1, 7) if k not in rows]):
            moved = rng.choice(free)
            rows[moved] = rows.pop(key)
            change = upd({"id": key, "v": rows[moved]}, id=moved, v=rows[moved])
        else:
            before, rows[key] = rows[key], rng.randint(0, 9)
            change = upd({"id": key, "v": before}, id=key, v=rows[key])
        out.append(txn(pos, change, ins("log", v=pos)))
    return out


def test_reducing_contiguous_runs_first_then_their_nets_gives_the_same_net_changes() -> None:
    rng = random.Random(14)
    for _ in range(200):
        history = _history(rng, rng.randint(1, 40))
        whole = reduce_changes([c for t in history for c in _changes(t)], KEYS)
        cuts = sorted(rng.sample(range(len(history) + 1), 2))
        runs = [history[: cuts[0]], history[cuts[0] : cuts[1]], history[cuts[1] :]]
        merged, key_of = Nets(), NetKeys(KEYS)  # as a partition merges the slices' nets
        for run in runs:
            for _, entry in routed(1, *run):
                merged.add(key_of(entry), entry)
        assert [t.changes for t in transactions(merged.result())] == [
            t.changes for t in transactions(_entries(whole))
        ]


def test_batches_are_cut_between_transactions_only_and_alike_every_time() -> None:
    def at(n: int) -> Entry:
        return [n, SCN(1, 1, 1, n).to_bytes(), 0, "d", "t", None, {"id": n}]

    entries = [at(scn) for scn in (1, 2, 2, 2, 3, 4, 4, 5)]
    cut = [[e[6]["id"] for e in batch] for batch in batches(entries, 2)]
    assert cut == [[1, 2, 2, 2], [3, 4, 4], [5]]
    assert cut == [[e[6]["id"] for e in batch] for batch in batches(entries, 2)]
    assert [len(b) for b in batches(entries, 100)] == [8]
    assert list(batches([], 2)) == []


def test_tables_given_as_unreduced_keep_every_change_in_order_routed_by_key() -> None:
    history = [
        txn(10, ins("t", id=1, v="a")),
        txn(20, upd({"id": 1, "v": "a"}, id=1, v="b")),
        txn(30, RowChange("db", "t", Op.DELETE, {"id": 1, "v": "b"}, None)),
        txn(40, upd({"id": 2, "v": "x"}, id=3, v="x")),
    ]
    router = Router(KEYS, 5, unreduced={("db", "t")})
    for t in history:
        route(t, router)
    out = [(part, e) for part, nets in router.parts.items() for e in nets.result()]
    one = [e for part, e in out if part == partition_of(("db", "t", 1), 5)]
    assert [op_of(e) for e in one if (e[6] or e[5])["id"] == 1] == [
        Op.INSERT, Op.UPDATE, Op.DELETE
    ], "every change kept, in SCN order, with its key"  # fmt: skip
    moved = {
        (op_of(e), (e[6] or e[5])["id"]): part
        for part, e in out
        if e[1] == history[3].scn.to_bytes()
    }
    assert moved == {
        (Op.DELETE, 2): partition_of(("db", "t", 2), 5),
        (Op.INSERT, 3): partition_of(("db", "t", 3), 5),
    }
    merged, key_of = Nets(), NetKeys(KEYS, {("db", "t")})  # and the partition keeps them too
    for _, entry in sorted(out, key=lambda item: item[1][0]):
        merged.add(key_of(entry), entry)
    assert len(merged.result()) == 5


def _changes(t: Transaction) -> list[Change]:
    return [Change(t.scn, t.timestamp, c) for c in t.changes]


def _entries(changes: list[Change]) -> list[Entry]:
    return [[n, c.scn.to_bytes(), c.timestamp, c.change.schema, c.change.table, c.change.before,
             c.change.after] for n, c in enumerate(changes)]  # fmt: skip
