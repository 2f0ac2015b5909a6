"""Which source transactions of a group may be applied at once, on separate connections. Pure.

Two source transactions *depend* on each other when they touch a common key: the values of
the primary key or of a UNIQUE key of a table, in a before or an after image (the keys of
drc.apply.shapes: NULLs collide with nothing, strings compared folded). Dependence is made
transitive (union-find), and each class of dependent transactions is one *component*: its
transactions stay in stream order on one connection, so every key sees its changes in the
order the source made them, and the conflict engine reads and decides each key as it would one
by one. Components share no key, so their order against each other changes nothing a key sees.

Coarser keys where rows are not the whole story:

- a keyless table (matched by whole row) is one key: its transactions stay in order;
- a table that keeps order (``TargetTable.keeps_order``: a foreign key to or from it, or a
  trigger that fires for DRC's writes) touches :data:`EVERYTHING`, one key shared by all
  such tables: a child row never races its parent, a trigger never sees another order;
- a tombstone row (drc.conflicts) touches nothing of its own: it only dates a delete of the
  same transaction.

A transaction in fragments (one SCN) is one transaction here. Components are packed into at
most ``workers`` parts, largest first onto the part with the fewest rows so far; each part lists
its transactions in stream order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from drc.apply.shapes import table_key, touched_keys
from drc.core.events import Transaction
from drc.core.markers import is_tombstone_table
from drc.core.scn import SCN
from drc.core.target_table import TargetTable

EVERYTHING: Hashable = ("*",)  # the key every table that keeps order touches

Describe = Callable[[str, str], TargetTable]


def keys_of(txn: Transaction, describe: Describe) -> set[Hashable]:
    """Every key the transaction's changes touch."""
    keys: set[Hashable] = set()
    for change in txn.changes:
        if is_tombstone_table(change.schema, change.table):
            continue
        table = describe(change.schema, change.table)
        if table.keeps_order:
            keys.add(EVERYTHING)
            continue
        keys.update(touched_keys(change, table, table_key(table)))
    return keys


def split(
    transactions: Sequence[Transaction], describe: Describe, workers: int
) -> list[list[Transaction]]:
    """The group's transactions in at most ``workers`` parts that share no key (one part when
    everything depends on everything, or ``workers`` is 1)."""
    if workers <= 1 or not transactions:
        return [list(transactions)] if transactions else []
    order: list[SCN] = []
    members: dict[SCN, list[Transaction]] = {}
    for txn in transactions:
        if txn.scn not in members:
            members[txn.scn] = []
            order.append(txn.scn)
        members[txn.scn].append(txn)
    parent = list(range(len(order)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[Hashable, int] = {}
    for index, scn in enumerate(order):
        for txn in members[scn]:
            for key in keys_of(txn, describe):
                found = owner.setdefault(key, index)
                if found != index:
                    a, b = root(found), root(index)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
    components: dict[int, list[int]] = {}
    for index in range(len(order)):
        components.setdefault(root(index), []).append(index)
    if len(components) == 1:
        return [list(transactions)]
    sizes = {
        r: sum(len(t.changes) + 1 for i in ids for t in members[order[i]])
        for r, ids in components.items()
    }
    parts: list[list[int]] = [[] for _ in range(min(workers, len(components)))]
    loads = [0] * len(parts)
    for r in sorted(components, key=lambda r: (-sizes[r], r)):
        emptiest = loads.index(min(loads))
        parts[emptiest].extend(components[r])
        loads[emptiest] += sizes[r]
    return [[t for i in sorted(ids) for t in members[order[i]]] for ids in parts]
