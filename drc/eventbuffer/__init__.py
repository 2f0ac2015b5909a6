"""The EventBuffer: append-only, SCN-indexed segment files of opaque transaction payloads.

The on-disk format is specified in :mod:`drc.eventbuffer.format`; the API is
:class:`EventBuffer`, serving :class:`Record` batches.
"""

from drc.eventbuffer.buffer import DEFAULT_SEGMENT_BYTES, EventBuffer
from drc.eventbuffer.reader import Record

__all__ = ["DEFAULT_SEGMENT_BYTES", "EventBuffer", "Record"]
