"""The compiled hot path (drc.native): the setting, the build's freshness check, and the same
bytes from the compiled and the pure modules (tests/support/native_corpus), and the same
statements (tests/support/native_apply)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drc import native
from drc.core import codec
from tests.support.tools import require_compiled_build

REPO = Path(__file__).resolve().parents[2]


def run(setting: str, outputs: str = "tests.support.native_corpus") -> dict[str, object]:
    env = {**os.environ, native.SETTING: setting, "PYTHONHASHSEED": "0"}
    argv = [sys.executable, "-m", outputs]
    out = subprocess.run(argv, cwd=REPO, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_the_setting_reads_auto_on_and_off() -> None:
    assert native.setting({}) == "auto"
    assert native.setting({"DRC_COMPILED": " ON "}) == "on"
    assert native.setting({"DRC_COMPILED": "1"}) == "on"
    assert native.setting({"DRC_COMPILED": "no"}) == "off"
    with pytest.raises(ValueError, match="use auto, on or off"):
        native.setting({"DRC_COMPILED": "fast"})


def test_a_build_is_used_only_when_complete_and_fresh(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    assert native.built_files(manifest)[1].startswith("not built")
    suffix = native.importlib.machinery.EXTENSION_SUFFIXES[0]
    source = native.source_path("drc.core.codec")
    built = {
        "suffix": suffix,
        "modules": {name: name.replace(".", "/") + suffix for name in native.MODULES},
        "shared": {"name": "drc_native__mypyc", "file": "drc_native__mypyc" + suffix},
        "sources": {"drc.core.codec": "core/codec.py"},
        "sha256": {"drc.core.codec": native.digest(source)},
    }
    manifest.write_text(json.dumps({**built, "suffix": ".other.so"}))
    assert "this interpreter loads" in native.built_files(manifest)[1]
    manifest.write_text(json.dumps({**built, "sha256": {"drc.core.codec": "0" * 64}}))
    assert native.built_files(manifest)[1].startswith("stale: core/codec.py changed")
    manifest.write_text(json.dumps(built))
    assert native.built_files(manifest)[1].startswith("incomplete")
    for file in [*built["modules"].values(), built["shared"]["file"]]:  # type: ignore[attr-defined]
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_bytes(b"")
    files, _ = native.built_files(manifest)
    assert (
        files is not None
        and files["drc.core.codec"] == tmp_path / built["modules"]["drc.core.codec"]
    )  # type: ignore[index]


def test_off_runs_the_pure_modules() -> None:
    assert run("off") == {"compiled": False, "digest": run("off")["digest"]}


def test_this_process_runs_what_the_state_says() -> None:
    assert native.is_compiled(codec) == native.STATE.compiled


def test_compiled_and_pure_give_the_same_bytes() -> None:
    require_compiled_build()
    compiled, pure = run("on"), run("off")
    assert compiled["compiled"] is True and pure["compiled"] is False
    assert compiled["digest"] == pure["digest"]


def test_compiled_and_pure_apply_write_the_same_statements() -> None:
    """Records to the filter chain, planned writes, statements and parameters, rendered text,
    effects and fallbacks (tests/support/native_apply): the same in both."""
    require_compiled_build()
    compiled, pure = (
        run("on", "tests.support.native_apply"),
        run("off", "tests.support.native_apply"),
    )
    assert compiled["compiled"] is True and pure["compiled"] is False
    assert compiled["digest"] == pure["digest"]


def test_the_apply_modules_are_compiled_with_the_decoder() -> None:
    assert {"drc.apply.plan", "drc.apply.shapes", "drc.mysql.sql"} <= set(native.MODULES)


def test_the_status_says_which_hot_path_runs() -> None:
    from drc.api.status import hot_path

    shown = hot_path()
    assert shown["compiled"] is native.STATE.compiled is native.is_compiled(codec)
    assert shown["setting"] in ("auto", "on", "off") and shown["reason"]


def test_statements_and_writes_pickle_and_copy_compiled_or_not() -> None:
    """Compiled, a frozen class refuses pickle's attribute-by-attribute restore: the apply's
    value classes pickle by constructor instead (a Spark task may carry them)."""
    import copy
    import pickle

    from drc.apply import plan
    from drc.apply.engine import KnownTables
    from drc.core.target_table import TargetTable
    from drc.mysql.sql import Statement

    table = TargetTable("db", "t", ("id", "v"), ("id",))
    match = Statement("`id` = %s", (1,))
    upsert = plan.Upsert(table, ("id", "v"), ((1, "x"),))
    values = [
        match,
        upsert,
        plan.Insert(table, ("id", "v"), ((1, "x"),)),
        plan.Delete(table, match, 1),
        plan.Update(table, ("id", "v"), (1, "y"), match, upsert, None),
        KnownTables({("db", "t"): table}),
    ]
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.copy(value) == value == copy.deepcopy(value)
