"""Fencing at the buffer: only the current leader's term may append (drc.core.term).

:class:`TermFile` keeps, in the buffer directory, the highest term this member has written
records under (``term.json``). :class:`GroupBuffer` stands for the member's EventBuffer
everywhere (capture, follower, pull API): reads pass through, while every append and commit
first asks its fence whether this writer may still write, so a deposed or paused leader never
touches its buffer files again.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from drc.core.errors import BufferStateError
from drc.core.term import check_append
from drc.eventbuffer import EventBuffer
from drc.eventbuffer.buffer import AppendItem

TERM_FILE = "term.json"


class TermFile:
    """The highest leadership term whose records this buffer holds (0: none yet)."""

    def __init__(self, directory: Path) -> None:
        self._path = Path(directory) / TERM_FILE
        self._lock = threading.Lock()
        self.term = self._read()

    def _read(self) -> int:
        try:
            data = json.loads(self._path.read_text())
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as exc:
            raise BufferStateError(
                f"{self._path} is not readable ({exc}); it records the leadership term of the "
                "buffer's newest records: restore it, or write {\"term\": 0} if the group's "
                "ZooKeeper term counter is also new"
            ) from exc
        term = data.get("term") if isinstance(data, dict) else None
        if type(term) is not int or term < 0:
            raise BufferStateError(f"{self._path} holds no valid term: {data!r}")
        return term

    def raise_to(self, term: int) -> None:
        """Record ``term`` before records of it are appended; FencedError if older."""
        with self._lock:
            check_append(self.term, term)
            if term == self.term:
                return
            tmp = self._path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps({"term": term}))
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self._path)
            dir_fd = os.open(self._path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self.term = term


class GroupBuffer:
    """An EventBuffer whose writes go through a fence; reads are the buffer's own.

    ``fence`` raises FencedError when this writer may not write now (set by the group runner:
    the leader's lease and term, or a follower's copy rule). :meth:`reopen` replaces the
    buffer with a fresh open of the same directory, dropping appends never committed.
    """

    def __init__(self, opener: Callable[[], EventBuffer]) -> None:
        self._opener = opener
        self._inner = opener()
        self.term_file = TermFile(self._inner.directory)
        self.fence: Callable[[], None] = lambda: None

    @property
    def inner(self) -> EventBuffer:
        return self._inner

    def append(self, *args: Any, **kwargs: Any) -> None:
        self.fence()
        self._inner.append(*args, **kwargs)

    def append_many(self, records: Iterable[AppendItem]) -> int:
        self.fence()
        return self._inner.append_many(records)

    def commit(self) -> None:
        # Checked again once the records are written, before they are visible: a leader
        # paused between the first check and the write (longer than its lease) would
        # otherwise publish records after another member took over. Its files are then cut
        # back to the last commit (and the pause path reopens the buffer).
        self.fence()
        self._inner.commit(self.fence)

    def reopen(self) -> None:
        old = self._inner
        old.close()
        self._inner = self._opener()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class FencedMetaStore:
    """The metastore as capture and the copier write it: behind the same fence as the buffer
    (capture records a schema before it appends the transaction that needs it)."""

    def __init__(self, inner: Any, buffer: GroupBuffer) -> None:
        self._inner = inner
        self._buffer = buffer

    def record_schema(self, *args: Any, **kwargs: Any) -> bool:
        self._buffer.fence()
        return bool(self._inner.record_schema(*args, **kwargs))

    def record_ddl(self, *args: Any, **kwargs: Any) -> None:
        self._buffer.fence()
        self._inner.record_ddl(*args, **kwargs)

    def import_entries(self, *args: Any, **kwargs: Any) -> int:
        self._buffer.fence()
        return int(self._inner.import_entries(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
