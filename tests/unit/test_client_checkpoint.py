"""Checkpoint stores: a file checkpoint is replaced atomically and never read as "zero"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drc.client import CheckpointError, CheckpointStore, FileCheckpointStore, MemoryCheckpointStore
from drc.core.scn import SCN

S1 = SCN(1, 7, 3, 400)
S2 = SCN(1, 7, 4, 120)


def test_a_missing_file_means_no_checkpoint_yet(tmp_path: Path) -> None:
    assert FileCheckpointStore(tmp_path / "none.ckpt").load() is None


def test_saved_scn_reloads_in_a_new_store_and_the_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "x.ckpt"
    FileCheckpointStore(path).save(S1)
    FileCheckpointStore(path).save(S2)
    assert FileCheckpointStore(path).load() == S2
    assert path.read_text() == '{"version": 1, "scn": "1:7:4:120"}\n'
    assert [p.name for p in path.parent.iterdir()] == ["x.ckpt"]  # no temp file left


def test_a_crash_before_the_rename_leaves_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.ckpt"
    store = FileCheckpointStore(path)
    store.save(S1)

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(CheckpointError, match="cannot save checkpoint"):
        store.save(S2)
    assert store.load() == S1
    assert [p.name for p in tmp_path.iterdir()] == ["x.ckpt"]


def test_save_fsyncs_the_file_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    FileCheckpointStore(tmp_path / "x.ckpt").save(S1)
    assert calls == ["file", "rename", "dir"]


@pytest.mark.parametrize(
    "text", ["", "1:7:3:400", '{"version": 2, "scn": "1:7:3:400"}', '{"version": 1, "scn": "x"}']
)
def test_a_corrupt_checkpoint_raises_instead_of_starting_over(tmp_path: Path, text: str) -> None:
    path = tmp_path / "x.ckpt"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=str(path)):
        FileCheckpointStore(path).load()


def test_memory_store_records_every_save_and_both_stores_fit_the_protocol() -> None:
    store = MemoryCheckpointStore(S1)
    store.save(S2)
    assert store.load() == S2 and store.saved == [S2]
    assert isinstance(store, CheckpointStore)
    assert isinstance(FileCheckpointStore("x"), CheckpointStore)
