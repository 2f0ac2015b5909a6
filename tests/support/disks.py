"""A small filesystem a test mounts (a loop-mounted ext4 image; the tests run as root) and fills
to the last block, to see what runs on it do when the disk is full."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FILLER = "filler"


@contextmanager
def small_filesystem(directory: Path, size_mb: int = 8) -> Iterator[Path]:
    """An ext4 filesystem of ``size_mb`` mounted at ``directory``/mnt (no blocks reserved for
    root: the servers run as root and must meet the full disk too); unmounted afterwards."""
    image, mount = directory / "disk.img", directory / "mnt"
    mount.mkdir(parents=True)
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    _run("mount", "-o", "loop", str(image), str(mount))
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            _run("umount", "-l", str(mount))  # still open by a server: detach it anyway
        image.unlink()


def fill(mount: Path) -> int:
    """Take every free block of ``mount`` with a filler file; its size in bytes."""
    path = mount / FILLER
    chunk = b"\0" * (64 << 10)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path.stat().st_size


def free(mount: Path) -> None:
    """Give the filler's blocks back."""
    (mount / FILLER).unlink()


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
