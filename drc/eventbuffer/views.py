"""Where an EventBuffer's readers get their View, and how they wait for a newer one.

In the writer's process the writer publishes a View at each commit (:class:`Published`): it
wakes the waiting threads and calls the commit listeners, nothing polls. A read-only buffer,
which another process writes, looks at the directory again on each read (:class:`Rescanned`)
and polls it while waiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from drc.core.errors import BufferStateError
from drc.core.scn import SCN
from drc.eventbuffer.layout import BufferMeta, read_meta
from drc.eventbuffer.reader import Record, View, read_batch
from drc.eventbuffer.recovery import load_new_segments, load_segments, scanned_view

log = logging.getLogger(__name__)
READ_ONLY_POLL_S = 0.05


class Views:
    """The View readers see now, until the buffer is closed."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise BufferStateError(f"EventBuffer {self.view.directory} is closed")

    def current(self) -> View:
        self.check_open()
        return self.view

    def fresh(self) -> View:
        """The newest View there is (the current one, unless another process writes)."""
        return self.current()

    def read(
        self, after: SCN, max_records: int, max_bytes: int, within: int = 0, split: bool = False
    ) -> list[Record]:
        return read_batch(self.current(), after, max_records, max_bytes, within=within, split=split)

    def wait_past(self, after: SCN, deadline: float) -> bool:
        """Whether a record with SCN > ``after`` is committed by ``deadline`` (monotonic)."""
        raise NotImplementedError

    def listen(self, listener: Callable[[], None]) -> bool:
        """Call ``listener`` after each commit; False where commits are not seen as they are
        made."""
        return False

    def tell(self) -> None:
        """Call the listeners :meth:`listen` took."""

    def release(self) -> None:
        """Once ``closed`` is set: wake the waiting threads and unmap the segments."""
        for seg in self.view.segments:
            seg.close()


class Published(Views):
    """Views the writer in this process publishes at each commit."""

    def __init__(self, view: View) -> None:
        super().__init__(view)
        self._cond = threading.Condition()
        self._listeners: list[Callable[[], None]] = []

    def publish(self, view: View) -> None:
        """What readers see from now on; wakes the waiting threads."""
        with self._cond:
            self.view = view
            self._cond.notify_all()

    def tell(self) -> None:
        """In the committing thread, once a commit is visible (and on close)."""
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # a reader's bug must not fail the writer's commit
                log.exception("an EventBuffer commit listener failed")

    def listen(self, listener: Callable[[], None]) -> bool:
        self._listeners.append(listener)
        return True

    def wait_past(self, after: SCN, deadline: float) -> bool:
        with self._cond:
            while True:
                last = self.view.last_scn
                if last is not None and last > after:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.closed:
                    return False
                self._cond.wait(remaining)

    def release(self) -> None:
        with self._cond:
            self._cond.notify_all()
        super().release()


class Rescanned(Views):
    """Views of a directory another process writes: looked at again on each read, one read
    at a time."""

    def __init__(self, view: View, meta: BufferMeta, index_every: int) -> None:
        super().__init__(view)
        self._meta = meta
        self._index_every = index_every
        self._lock = threading.RLock()

    @classmethod
    def open(cls, directory: Path, index_every: int) -> Rescanned:
        """The committed View of ``directory``, changing nothing: it ends at the last complete
        transaction before the first invalid or unfinished tail."""
        meta = read_meta(directory) if directory.is_dir() else None
        if meta is None:
            raise BufferStateError(f"{directory} is not an EventBuffer directory (no buffer.json)")
        segments = load_segments(directory, meta, index_every, repair=False, sync=False)
        if not segments:
            raise BufferStateError(f"EventBuffer {directory} has no readable segment")
        return cls(scanned_view(directory, meta, segments), meta, index_every)

    def fresh(self) -> View:
        """Look at the directory again: new commits, deleted segments."""
        self.check_open()
        with self._lock:
            directory = self.view.directory
            known = list(self.view.segments)
            segments = load_new_segments(directory, self._meta, known, self._index_every)
            self.view = scanned_view(directory, self._meta, segments)
            return self.view

    def read(
        self, after: SCN, max_records: int, max_bytes: int, within: int = 0, split: bool = False
    ) -> list[Record]:
        with self._lock:
            return read_batch(
                self.fresh(), after, max_records, max_bytes, within=within, split=split
            )

    def wait_past(self, after: SCN, deadline: float) -> bool:
        while True:
            last = self.fresh().last_scn
            if last is not None and last > after:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                return False
            time.sleep(min(READ_ONLY_POLL_S, remaining))
