"""Snapshot windows: what a channel drops, converges and applies as usual for a copied table."""

from __future__ import annotations

import pytest

from drc.apply.windows import DropCopied, join, parse
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.core.windows import Window, Windows


def scn(pos: int) -> SCN:
    return SCN(1, 11, 1, pos)


WINDOW = Window(("src", "t"), ("dst", "t"), scn(100), scn(200))


def test_changes_up_to_the_copy_are_dropped_then_converge_then_apply():
    windows = Windows([WINDOW])
    assert windows.drops(scn(100), "dst", "t")
    assert not windows.converging(scn(100), "dst", "t")
    assert windows.converging(scn(101), "dst", "t") and windows.converging(scn(200), "dst", "t")
    assert not windows.drops(scn(201), "dst", "t")
    assert not windows.converging(scn(201), "dst", "t")


def test_other_tables_are_untouched():
    windows = Windows([WINDOW])
    assert not windows.drops(scn(1), "src", "t")  # windows are by target name
    assert not windows.converging(scn(150), "dst", "u")


def test_a_keyless_table_window_is_empty_nothing_both_copied_and_applied():
    keyless = Windows([Window(("s", "k"), ("s", "k"), scn(50), scn(50))])
    assert keyless.drops(scn(50), "s", "k")
    assert not keyless.converging(scn(50), "s", "k")
    assert not keyless.drops(scn(51), "s", "k") and not keyless.converging(scn(51), "s", "k")


def test_a_window_ending_before_it_starts_is_refused():
    with pytest.raises(ValueError, match="before copied_at"):
        Window(("a", "b"), ("a", "b"), scn(10), scn(9))


def test_open_windows_and_joined_names():
    windows = Windows([WINDOW, Window(("a", "b"), ("a", "b"), scn(10), scn(20))])
    assert [w.target for w in windows.open_after(scn(150))] == [("dst", "t")]
    assert windows.source_names() == ["a.b", "src.t"]


def test_the_stage_drops_only_the_copied_changes_of_a_transaction():
    stage = DropCopied(Windows([WINDOW]))
    copied = RowChange("dst", "t", Op.INSERT, None, {"id": 1})
    other = RowChange("dst", "u", Op.INSERT, None, {"id": 2})
    kept = stage(Transaction(scn(90), 11, None, 0, (copied, other)))
    assert kept is not None and kept.changes == (other,)
    assert stage.dropped == 1
    later = Transaction(scn(150), 11, None, 0, (copied,))
    assert stage(later) is later


def test_registry_rows_round_trip():
    statement = join("ch", WINDOW, 42)
    assert statement.params[:7] == ("ch", "src", "t", "dst", "t", str(scn(100)), str(scn(200)))
    rows = [("src", "t", "dst", "t", str(scn(100)), str(scn(200)))]
    assert parse(rows).by_target == {("dst", "t"): WINDOW}


def test_joined_tables_outside_the_channels_tables_are_selected_too():
    from drc.apply.windows import unselected, widened
    from drc.config_channels import ChannelConfig

    joined = Windows([WINDOW, Window(("a", "b"), ("a", "b"), scn(10), scn(20))])
    narrow = ChannelConfig(name="c", origin="dc1", remote=("http://x",), tables=("a.*",))
    assert unselected(narrow, joined) == ["src.t"]
    assert widened(narrow, joined).tables == ("a.*", "src.t")
    everything = ChannelConfig(name="c", origin="dc1", remote=("http://x",))
    assert widened(everything, joined) is everything
