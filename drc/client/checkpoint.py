"""Where a subscriber keeps the position it has processed up to, across restarts.

A checkpoint is the SCN after the last *acked* batch: everything at or before it was processed,
everything after it will be delivered again. The subscriber saves it only on ack, so a crash
between receiving and acking a batch redelivers that batch (at-least-once; make processing
idempotent or store the checkpoint in the same transaction as the results, as Apply does).

The file form is one JSON object, ``{"version": 1, "scn": "c:s:i:p"}``. It is replaced
atomically (write a temporary file in the same directory, fsync it, rename it over the old one,
fsync the directory), so after a crash at any instruction the file holds either the old or the
new checkpoint, never a torn mix.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

from drc.client.errors import CheckpointError
from drc.core.errors import MalformedScnError
from drc.core.scn import SCN

FORMAT_VERSION = 1


@runtime_checkable
class CheckpointStore(Protocol):
    """Durable storage of one SCN; ``save`` returns only once the SCN survives a crash."""

    def load(self) -> SCN | None: ...

    def save(self, scn: SCN) -> None: ...


class MemoryCheckpointStore:
    """A checkpoint that lives as long as the process (tests, or consumers with their own)."""

    def __init__(self, scn: SCN | None = None) -> None:
        self._lock = threading.Lock()
        self._scn = scn
        self.saved: list[SCN] = []  # every save, in order: lets tests see when saves happen

    def load(self) -> SCN | None:
        with self._lock:
            return self._scn

    def save(self, scn: SCN) -> None:
        with self._lock:
            self._scn = scn
            self.saved.append(scn)

    def __repr__(self) -> str:
        return f"MemoryCheckpointStore({self._scn})"


class FileCheckpointStore:
    """A checkpoint in one small JSON file, replaced atomically (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> SCN | None:
        """The saved SCN, or None if the file does not exist yet."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc}") from exc
        try:
            data = json.loads(text)
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {FORMAT_VERSION}")
            return SCN.parse(data["scn"])
        except (ValueError, KeyError, TypeError, AttributeError, MalformedScnError) as exc:
            raise CheckpointError(
                f"checkpoint {self.path} is not a DRC checkpoint ({exc}); it was edited or "
                'written by something else. Fix it (it holds {"version": 1, "scn": '
                '"c:s:i:p"}) or remove it to start from the subscriber\'s configured position'
            ) from exc

    def save(self, scn: SCN) -> None:
        data = json.dumps({"version": FORMAT_VERSION, "scn": str(scn)}) + "\n"
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            _fsync_dir(self.path.parent)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise CheckpointError(f"cannot save checkpoint {self.path}: {exc}") from exc

    def __repr__(self) -> str:
        return f"FileCheckpointStore({str(self.path)!r})"


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is: fsync the directory itself.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
