"""Routing of a span's changes to partitions: one key's changes together, keyless tables
whole, key moves split, tombstones with the key they date, stable across processes."""

from __future__ import annotations

import random
import subprocess
import sys
from decimal import Decimal

from drc.catchup.executor import _combined, batches
from drc.catchup.routing import partition_of, route, transactions
from drc.core.events import Op, RowChange, Transaction
from drc.core.reduce import Change, reduce_changes
from drc.core.scn import SCN

KEYS = {("db", "t"): ("id",), ("db", "log"): ()}


def txn(pos: int, *changes: RowChange, fragment: int = 0) -> Transaction:
    return Transaction(SCN(1, 1, 1, pos), 1, None, pos, tuple(changes), fragment=fragment)


def ins(table: str, **row: object) -> RowChange:
    return RowChange("db", table, Op.INSERT, None, row)


def upd(before: dict[str, object], **after: object) -> RowChange:
    return RowChange("db", "t", Op.UPDATE, before, after)


def test_every_change_of_a_key_goes_to_one_partition_and_keyless_tables_stay_whole() -> None:
    routed = [
        *route(txn(10, ins("t", id=1, v="a"), ins("log", v=1)), KEYS, 7),
        *route(txn(20, upd({"id": 1, "v": "a"}, id=1, v="b"), ins("log", v=2)), KEYS, 7),
    ]
    by_table: dict[str, set[int]] = {}
    for part, (_, item) in routed:
        by_table.setdefault(item.change.table, set()).add(part)
    assert all(len(parts) == 1 for parts in by_table.values())
    positions = [position for _, (position, _) in routed]
    assert positions == sorted(positions), "positions follow the stream"


def test_an_update_that_moves_the_key_is_routed_as_a_delete_and_an_insert() -> None:
    routed = list(route(txn(10, upd({"id": 1, "v": "a"}, id=2, v="a")), KEYS, 1000))
    ops = [(item.change.op, item.change.row["id"]) for _, (_, item) in routed]
    assert ops == [(Op.DELETE, 1), (Op.INSERT, 2)]
    assert routed[0][0] == partition_of(("db", "t", 1), 1000)
    assert routed[1][0] == partition_of(("db", "t", 2), 1000)


def test_a_tombstone_row_goes_with_the_key_it_dates() -> None:
    tomb = RowChange("drc", "tomb_x_db_t", Op.INSERT, None,
                     {"id": 5, "drc$schema": "db", "drc$table": "t"})  # fmt: skip
    delete = RowChange("db", "t", Op.DELETE, {"id": 5, "v": "a"}, None)
    (first, _), (second, _) = route(txn(10, delete, tomb), KEYS, 97)
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
    out = transactions(changes)
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
        routed = [item for t in history for _, item in route(t, KEYS, 1)]
        whole = reduce_changes([c for _, c in routed], KEYS)
        cuts = sorted(rng.sample(range(len(routed) + 1), 2))
        runs = [routed[: cuts[0]], routed[cuts[0] : cuts[1]], routed[cuts[1] :]]
        nets = sorted((i for run in runs for i in _combined(run, KEYS)), key=lambda i: i[0])
        assert [c.change for c in reduce_changes([c for _, c in nets], KEYS)] == [
            c.change for c in whole
        ]


def test_batches_are_cut_between_transactions_only_and_alike_every_time() -> None:
    def at(n: int) -> Change:
        return Change(SCN(1, 1, 1, n), 0, RowChange("d", "t", Op.INSERT, None, {"id": n}))

    changes = [at(scn) for scn in (1, 2, 2, 2, 3, 4, 4, 5)]
    cut = [[c.scn.log_pos for c in batch] for batch in batches(changes, 2)]
    assert cut == [[1, 2, 2, 2], [3, 4, 4], [5]]
    assert cut == [[c.scn.log_pos for c in batch] for batch in batches(changes, 2)]
    assert [len(b) for b in batches(changes, 100)] == [8]
    assert list(batches([], 2)) == []
