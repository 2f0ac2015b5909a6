"""Which SCN to read after to get every change committed at or after a wall-clock time.

For ``drc channel rewind --to-time``: the replicator answers with the SCN of the last record
committed before the time (or the servable start), so a reader replaying after it sees every
change from that time on. Record timestamps are the source's commit times (ms); progress
markers carry 0 and are passed over. Segments whose newest record is older are skipped whole.
"""

from __future__ import annotations

from typing import Any

from drc.core.errors import ScnTooOldError
from drc.core.scn import SCN

SCAN_BATCH = 1000


def scn_before(buffer: Any, at_ms: int) -> SCN:
    """The SCN to read after for everything committed at or after ``at_ms``.

    Raises ScnTooOldError when the buffer no longer holds what was committed just before
    ``at_ms`` (retention deleted it), so the caller cannot replay from that time.
    """
    start = buffer.oldest_servable
    for segment in buffer.segments():
        if segment.max_ts is not None and segment.max_ts >= at_ms:
            break
        if segment.count:
            start = max(start, SCN.from_bytes(segment.last_scn))
    after = start
    while True:
        records = buffer.read_after(after, max_records=SCAN_BATCH)
        if not records:
            return after
        for record in records:
            if record.timestamp_ms and record.timestamp_ms >= at_ms:
                if after == buffer.oldest_servable and after > SCN.zero():
                    raise ScnTooOldError(
                        f"the buffer holds changes only from SCN {after} on, committed after "
                        "the time asked for: older ones were deleted by retention",
                        after,
                    )
                return after
            if not record.more:
                after = record.scn
