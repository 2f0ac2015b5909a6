"""What a client of the pull API needs to speak it: paths, media types, headers, record split.

Pure (no FastAPI, no I/O) so the subscriber SDK imports it without the server side. The query
of a pull (parameters, their values, defaults and meaning) is :mod:`drc.api.pullquery`'s.

``GET /v1/events`` answers in one of two forms:

- JSON (default, :data:`MEDIA_JSON`)::

      {"epoch": "<buffer uuid>", "next": "c:s:i:p", "newest": "c:s:i:p" | null,
       "transactions": [drc.core.jsonwire.transaction_to_json(txn), ...]}

- Records (``Accept: application/x-drc-records``, :data:`MEDIA_RECORDS`; the Accept header is
  negotiated with q-values and wildcards, JSON on a tie, 406 when neither form is acceptable,
  see :mod:`drc.api.accept`): the body is the
  concatenation of drc.core.codec records, one per transaction (fragment), in SCN order; the
  batch's metadata travels in the :data:`HEADER_EPOCH`, :data:`HEADER_NEXT`,
  :data:`HEADER_NEWEST` (empty when the buffer is empty) and :data:`HEADER_COUNT` (records in
  the body) headers. :func:`split_records` turns such a body back into transactions.

Both forms carry the same records: one per stored transaction fragment that the filter kept.
``next`` is the SCN to pass as ``after`` in the next pull; it moves on even when the filter kept
nothing. ``newest`` is the newest SCN the replicator holds (``next == newest``: caught up).
A transaction is complete at its ``last_fragment`` record; with a table filter, fragments left
empty are dropped (so ``fragment`` numbers may skip) but the last one is always sent.
With no ``tables`` and no ``skip_drc`` every stored record is sent as stored, including the
replicator's empty progress markers (no changes, no DDL), so followers copy the buffer exactly.

Compression (for long, thin links): a client that sends :data:`HEADER_COMPRESSION` ``lz4``
may get a records body LZ4-compressed (:func:`compress_body`: the LZ4 block format with its
uncompressed size as a u32 little-endian prefix), said by the same header on the answer; a
body too small to gain is sent as it is, without the header. A server that does not know the
header ignores it, so the client learns what it got from the answer alone. JSON is never
compressed. Streams compress their batch frames the same way (drc.api.streamwire).

Errors are JSON in both cases: ``{"error": code, "message": text, ...}`` with the codes below.
"""

from __future__ import annotations

import struct

import lz4.block

from drc.core.codec import decode_transaction
from drc.core.events import Transaction

PATH_EVENTS = "/v1/events"
PATH_STATUS = "/v1/status"
PATH_POSITION = "/v1/position"  # ?at_ms=T: the SCN to replay after, from a time
PATH_SCHEMA = "/v1/schema"  # + /{db}/{table}?scn=S
PATH_SEGMENTS = "/v1/segments"  # [?after=S][&to=S]; + /{name}: one segment's bytes (Range)
PATH_HISTORY = "/v1/history"  # ?after=S&upto=U: metastore entries, for group followers
PATH_METRICS = "/metrics"
PATH_HEALTH = "/healthz"
PATH_PEERS = "/v1/peers"
PATH_GROUPS = "/v1/groups"  # consumer groups (drc.api.groups)
PATH_UI = "/ui"
PATH_UI_SCRIPT = "/ui.js"  # the status page's script (its own file: no inline script runs)

MEDIA_JSON = "application/json"
MEDIA_RECORDS = "application/x-drc-records"
MEDIA_SEGMENT = "application/x-drc-segment"  # a segment file's bytes (drc.eventbuffer.format)

HEADER_EPOCH = "X-DRC-Epoch"
HEADER_NEXT = "X-DRC-Next"
HEADER_NEXT_WITHIN = "X-DRC-Next-Within"  # a split page ends inside a transaction (pullquery)
HEADER_NEWEST = "X-DRC-Newest"
HEADER_COUNT = "X-DRC-Count"
# The leadership term of the replicator group under which the serving member's buffer was
# last written (drc.core.term); absent when the replicator runs without a group.
HEADER_TERM = "X-DRC-Term"
# Asked by a client, and said by a server on a body it compressed (see the module doc).
HEADER_COMPRESSION = "X-DRC-Compression"
COMPRESSION_LZ4 = "lz4"
COMPRESSIONS = ("none", COMPRESSION_LZ4)
# Smaller bodies are sent as they are: the gain would not pay for the work on both sides.
MIN_COMPRESS_BYTES = 512
# A compressed body that claims more than this is broken, not big (a batch is at most a few
# tens of MB; this bounds what a damaged or hostile answer can make a client allocate).
MAX_UNCOMPRESSED_BYTES = 1 << 30
_SIZE = struct.Struct("<I")
# A group range's pull stopped by the per-key barrier (drc.core.range_filter): the ranges,
# comma-separated, whose checkpoints it waits for.
HEADER_WAITING = "X-DRC-Waiting"
ERROR_STALE_ASSIGNMENT = "stale_assignment"  # 409: the range is not yours at that version

# GET /v1/segments takes an SCN range: after (drc.api.pullquery.PARAM_AFTER, as a pull) and to.
PARAM_TO = "to"

# The "error" field of an error body, by HTTP status.
ERROR_BAD_REQUEST = "bad_request"  # 400: malformed SCN, filter or parameter
ERROR_UNAUTHORIZED = "unauthorized"  # 401: bearer token missing or wrong
ERROR_FORBIDDEN = "forbidden"  # 403: a control action without an admin token
ERROR_CHANNEL_STATE = "channel_state"  # 409: the action does not fit the channel's state
ERROR_NOT_FOUND = "not_found"  # 404: unknown table (schema) or path
ERROR_NOT_ACCEPTABLE = "not_acceptable"  # 406: Accept allows neither form; body has "offered"
ERROR_EPOCH_MISMATCH = "epoch_mismatch"  # 409: buffer was rebuilt; body has current "epoch"
# 409: the pull would get DRC-originated transactions without their rows and did not say it
# takes them (drc_applied=marker) nor leave them out (skip_drc=1); body has "scn" (or null).
ERROR_ROWS_OMITTED = "rows_omitted"
ERROR_SCN_TOO_OLD = "scn_too_old"  # 410: body has "oldest", the oldest servable SCN
ERROR_NOT_A_MEMBER = "not_a_member"  # 410: the consumer group dropped the member: join again
# 429 / 503 for a pull that would wait while its token / the server holds the most long polls
# allowed; with Retry-After. Pull again after it, or at once with wait_ms=-1 (never refused).
ERROR_TOO_MANY_LONG_POLLS = "too_many_long_polls"  # 429
ERROR_LONG_POLLS_FULL = "long_polls_full"  # 503
# 503: readers hold [api] reader_memory_mb of records not yet sent; Retry-After
ERROR_READER_MEMORY_FULL = "reader_memory_full"
# 408 from GET /v1/wait: the GTID was not applied within timeout_ms; "waiting_for" says where
# the channel is. Ask again (nothing is lost by waiting twice).
ERROR_WAIT_TIMEOUT = "wait_timeout"
ERROR_INTERNAL = "internal"  # 500: logged server-side; the body says nothing more
ERROR_UNAVAILABLE = "unavailable"  # 503: buffer closed or capture failed
ERROR_RANGE = "range_not_satisfiable"  # 416: a segment Range starting at or past its end


def split_records(body: bytes | bytearray | memoryview) -> list[Transaction]:
    """Decode a records body into its transactions; CorruptRecordError if any record is bad."""
    txns: list[Transaction] = []
    offset = 0
    while offset < len(body):
        txn, offset = decode_transaction(body, offset)
        txns.append(txn)
    return txns


def accepts_compression(header: str | None) -> bool:
    """Whether a request's :data:`HEADER_COMPRESSION` asks for LZ4 (a comma-separated list)."""
    if not header:
        return False
    return COMPRESSION_LZ4 in (part.strip().lower() for part in header.split(","))


def compress_body(body: bytes) -> bytes | None:
    """``body`` LZ4-compressed, or None when it is too small or would not shrink."""
    if len(body) < MIN_COMPRESS_BYTES:
        return None
    packed: bytes = lz4.block.compress(body, store_size=True)
    return packed if len(packed) < len(body) else None


def decompress_body(data: bytes | memoryview) -> bytes:
    """The body :func:`compress_body` packed; ValueError when it is not one."""
    if len(data) < _SIZE.size:
        raise ValueError(f"a compressed body of {len(data)} bytes has no size prefix")
    (size,) = _SIZE.unpack_from(data)
    if size > MAX_UNCOMPRESSED_BYTES:
        raise ValueError(f"a compressed body claims {size} bytes, more than any batch")
    try:
        body: bytes = lz4.block.decompress(data)
    except lz4.block.LZ4BlockError as exc:
        raise ValueError(f"a damaged LZ4 body: {exc}") from exc
    if len(body) != size:
        raise ValueError(f"a compressed body gave {len(body)} bytes, its prefix says {size}")
    return body
