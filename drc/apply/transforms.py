"""Transformation hooks: a user function per table, given each row change and returning what to
apply instead (Debezium's single message transforms, Otter's EventProcessor).

A channel's ``transforms`` maps table patterns (source names, as ``tables``) to functions named
``module:function``::

    [channels.transforms]
    "shop.orders" = "mycompany.drc_hooks:orders"
    "shop.*" = "mycompany.drc_hooks:pii"

The first pattern (in the order written) matching a change's table names its hook. A hook is
called with one :class:`drc.core.events.RowChange` (``schema``, ``table``, ``op``, ``before``,
``after``; frozen: build a new one with ``dataclasses.replace``) and returns None (nothing is
applied), one RowChange, or an iterable of them, applied in that order in the same target
transaction. DDL is not given to hooks. A hook runs in the channel's thread, on every replay
too (a retry, a rewind), so it must be a function of its input.

Hooks are imported when the channel starts and imported again when the config is reloaded
(SIGHUP to ``drc run``), so a fixed hook takes effect without a restart. A hook that raises or
returns something else stops the channel at that source transaction, naming the hook and the
SCN; ``drc channel resume`` (after a fix and a reload) tries it again, ``drc channel skip``
goes past it, as for any stop.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from drc.apply.control import Stoppage
from drc.config_channels import TRANSFORM_SPEC
from drc.core.errors import ConfigError, FatalError, shown
from drc.core.events import RowChange, Transaction
from drc.core.tablefilter import TablePattern

Hook = Callable[[RowChange], Any]


class TransformError(FatalError):
    """A hook raised, or returned something that is not row changes: the channel stops."""


def load(spec: str, fresh: bool = True) -> Hook:
    """The function ``module:function``; ``fresh``: the module imported again if it was
    (a reload picks up a fixed hook). ConfigError saying what is wrong otherwise."""
    if not TRANSFORM_SPEC.match(spec):
        raise ConfigError(f"transform {shown(spec)} must look like module:function")
    module_name, _, function_name = spec.partition(":")
    try:
        module = sys.modules.get(module_name)
        if module is not None and fresh:
            module = importlib.reload(module)
        elif module is None:
            module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of user code
        raise ConfigError(f"transform {spec!r}: cannot import {module_name}: {exc}") from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(f"transform {spec!r}: {module_name} has no function {function_name}")
    return function  # type: ignore[no-any-return]


class Transforms:
    """The chain stage (drc.apply.stages.Stage) that runs each change through its table's hook."""

    def __init__(self, specs: Mapping[str, str], loader: Callable[[str], Hook] = load) -> None:
        loaded: dict[str, Hook] = {}
        self._hooks: list[tuple[TablePattern, str, Hook]] = []
        for pattern, spec in specs.items():
            if spec not in loaded:
                loaded[spec] = loader(spec)
            self._hooks.append((TablePattern.parse(pattern), spec, loaded[spec]))
        self._by_table: dict[tuple[str, str], tuple[str, Hook] | None] = {}

    def __call__(self, txn: Transaction) -> Transaction | None:
        if not self._hooks or not txn.changes:
            return txn
        out: list[RowChange] = []
        for change in txn.changes:
            found = self._hook(change.schema, change.table)
            if found is None:
                out.append(change)
                continue
            spec, hook = found
            try:
                out.extend(_changes(hook(change)))
            except Exception as exc:  # user code: any failure stops the channel, named
                error = TransformError(
                    f"transform {spec} failed on {change.schema}.{change.table} in the source "
                    f"transaction at SCN {txn.scn}: {type(exc).__name__}: {exc}; fix it, reload "
                    "(SIGHUP) and `drc channel resume`, or `drc channel skip` the transaction"
                )
                error.stoppage = Stoppage.at(txn.scn, error, [txn])
                raise error from exc
        if not out and not txn.ddl:
            return None
        return dataclasses.replace(txn, changes=tuple(out))

    def _hook(self, schema: str, table: str) -> tuple[str, Hook] | None:
        key = (schema, table)
        if key not in self._by_table:
            self._by_table[key] = next(
                ((spec, hook) for p, spec, hook in self._hooks if p.matches(schema, table)), None
            )
        return self._by_table[key]


def _changes(result: Any) -> Iterable[RowChange]:
    if result is None:
        return ()
    if isinstance(result, RowChange):
        return (result,)
    if isinstance(result, Iterable) and not isinstance(result, str | bytes | Mapping):
        changes = list(result)
        wrong = [type(c).__name__ for c in changes if not isinstance(c, RowChange)]
        if not wrong:
            return changes
        raise TypeError(f"returned an iterable holding {', '.join(sorted(set(wrong)))}")
    raise TypeError(f"returned a {type(result).__name__}, not None, a RowChange or RowChanges")
