"""The subscriber SDK: pull DRC's change stream by SCN, with ack, checkpoints and failover.

    with Subscriber(["http://dc1-a:8640", "http://dc1-b:8640"], tables="shop.*",
                    checkpoint=FileCheckpointStore("shop.ckpt"), token=token) as sub:
        for txn in assemble(sub):          # or sub.get() / sub.ack(batch) / sub.rollback()
            apply(txn)

Bulk catch-up copies whole segments instead: :class:`SegmentSource` lists them, downloads each
(resuming, checksum verified) and :func:`read_segment` reads a copy.

Read your writes across datacenters: after writing on dc1 (``SELECT @@last_gtid`` there),
``wait_for_gtid("http://dc2-a:8640", gtid, timeout_ms=5000)`` returns once dc2 applied it and
raises :class:`WaitTimeoutError` otherwise.

HTTPS with a private CA: ``Subscriber(["https://dc1-a:8640"], ca="dc1-ca.pem")`` (and
``cert=``/``key=`` for a client certificate, ``verify=False`` to not check at all).

Only this package and the CLI import httpx.
"""

from drc.client.checkpoint import CheckpointStore, FileCheckpointStore, MemoryCheckpointStore
from drc.client.errors import (
    AckError,
    ApiAuthError,
    ApiRequestError,
    ApiTlsError,
    ApiUnavailableError,
    BufferRebuiltError,
    CheckpointError,
    FragmentError,
    PositionTooOldError,
    ProtocolError,
    SegmentDownloadError,
    WaitTimeoutError,
)
from drc.client.fragments import assemble
from drc.client.group_consumer import ChunkBatch, GroupConsumer, RangeBatch
from drc.client.segments import SegmentInfo, SegmentList, SegmentSource, read_segment
from drc.client.status import fetch_status
from drc.client.subscriber import Batch, Subscriber
from drc.client.waits import wait_for_gtid

__all__ = [
    "AckError",
    "ApiAuthError",
    "ApiRequestError",
    "ApiTlsError",
    "ApiUnavailableError",
    "Batch",
    "BufferRebuiltError",
    "CheckpointError",
    "CheckpointStore",
    "FileCheckpointStore",
    "FragmentError",
    "ChunkBatch",
    "GroupConsumer",
    "MemoryCheckpointStore",
    "PositionTooOldError",
    "ProtocolError",
    "RangeBatch",
    "SegmentDownloadError",
    "SegmentInfo",
    "SegmentList",
    "SegmentSource",
    "Subscriber",
    "WaitTimeoutError",
    "assemble",
    "fetch_status",
    "read_segment",
    "wait_for_gtid",
]
