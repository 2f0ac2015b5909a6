"""Transformation hooks (drc.apply.transforms): what a hook returns is what is applied, and a
hook that fails names itself and the transaction it stopped at."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from drc.apply.control import Stoppage
from drc.apply.transforms import TransformError, Transforms, load
from drc.core.errors import ConfigError
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN


def change(table: str, id_: int, v: str = "x") -> RowChange:
    return RowChange("db", table, Op.INSERT, None, {"id": id_, "v": v})


def txn(*changes: RowChange) -> Transaction:
    return Transaction(SCN(1, 1, 1, 99), 1, None, 0, changes)


def test_a_hook_drops_keeps_and_multiplies_changes_in_order() -> None:
    def hook(c: RowChange) -> Any:
        if c.after and c.after["v"] == "drop":
            return None
        if c.after and c.after["v"] == "two":
            return [c, dataclasses.replace(c, table="copy")]
        return c

    transforms = Transforms({"db.t": "m:hook"}, loader=lambda spec: hook)
    out = transforms(txn(change("t", 1, "drop"), change("t", 2, "two"), change("u", 3)))
    assert out is not None
    assert [(c.table, c.after["id"]) for c in out.changes if c.after] == [
        ("t", 2),
        ("copy", 2),
        ("u", 3),
    ]
    assert transforms(txn(change("t", 1, "drop"))) is None  # nothing left to apply


def test_the_first_matching_pattern_names_the_hook() -> None:
    seen: list[str] = []
    hooks = {"a": lambda c: seen.append("a") or c, "b": lambda c: seen.append("b") or c}
    transforms = Transforms({"db.t": "m:a", "db.*": "m:b"}, loader=lambda s: hooks[s[2:]])
    transforms(txn(change("t", 1), change("other", 2)))
    assert seen == ["a", "b"]


@pytest.mark.parametrize(
    "result", ["text", 5, [RowChange("db", "t", Op.DELETE, {"id": 1}, None), 7]]
)
def test_a_hook_that_fails_stops_at_its_transaction_naming_itself(result: Any) -> None:
    transforms = Transforms({"db.t": "m:bad"}, loader=lambda spec: lambda c: result)
    with pytest.raises(TransformError, match=r"transform m:bad failed on db.t .* SCN 1:1:1:99"):
        transforms(txn(change("t", 1)))


def test_an_exception_of_the_hook_is_the_stop_an_operator_skips() -> None:
    def raising(c: RowChange) -> Any:
        raise KeyError("no such customer")

    transforms = Transforms({"db.t": "m:raising"}, loader=lambda spec: raising)
    with pytest.raises(TransformError) as caught:
        transforms(txn(change("t", 1)))
    assert "KeyError" in str(caught.value) and "drc channel skip" in str(caught.value)
    stoppage = caught.value.stoppage
    assert isinstance(stoppage, Stoppage) and stoppage.scn == SCN(1, 1, 1, 99)
    assert stoppage.tables == {"db.t": 1}


def test_loading_says_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match="module:function"):
        load("no colon")
    with pytest.raises(ConfigError, match="cannot import"):
        load("drc_no_such_module_x:f")
    with pytest.raises(ConfigError, match="has no function nope"):
        load("tests.integration.transforms:nope")
    assert callable(load("tests.integration.transforms:broken"))


def test_a_reload_imports_a_fixed_hook_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a config reload (SIGHUP) does: the chain is built again, its hooks imported again."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = tmp_path / "drc_test_hook_reload.py"
    module.write_text("def hook(change):\n    raise ValueError('version 1')\n")
    with pytest.raises(ValueError, match="version 1"):
        load("drc_test_hook_reload:hook")(change("t", 1))
    module.write_text("def hook(change):\n    return None  # version 2, fixed\n")
    os.utime(module, (module.stat().st_mtime + 5,) * 2)  # a new mtime: not the cached bytecode
    assert Transforms({"db.t": "drc_test_hook_reload:hook"})(txn(change("t", 1))) is None
