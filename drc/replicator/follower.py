"""Copy another group member's buffer and schema history, record for record, byte for byte.

One :meth:`Copier.copy_once` takes the records after this buffer's last SCN off the pull API's
stream (drc.client.records.RawStreams; pulled from a member without streams) in its binary
form (no filter, so every stored record comes, progress markers included), first copies the
schema history entries up to the batch's last SCN (``/v1/history``), then appends each record
with the same SCN, payload bytes, timestamp and fragment flag, and commits.
Same SCNs, same bytes: a reader can move between members at any SCN.

Terms (drc.core.term): a follower copies only from the member ZooKeeper names as leader, and
refuses a batch served under an older term than that leader's or than its own buffer holds;
the buffer's term is raised to the batch's before the append.

:class:`ViaLeader` is a follower's back to source: a pull older than its buffer is asked of the
leader, which serves it from its own buffer or by reading the source binlog again
(drc.replicator.backfill). Only the leader reads the source, so followers never open binlog
connections of their own (whose replica server ids could clash with the leader's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drc.api import pullquery
from drc.client import http
from drc.client.errors import ApiRequestError, ApiTlsError, ProtocolError
from drc.client.records import RawStreams, last_scn, pull_history, pull_raw
from drc.core.errors import FatalError, RetriableError, ScnTooOldError
from drc.core.scn import SCN
from drc.core.term import check_records
from drc.eventbuffer.reader import Record
from drc.metastore.history import RawEntry
from drc.replicator.backfill import SOURCE_SEGMENT, start_marker
from drc.replicator.fencing import GroupBuffer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Copied:
    records: int
    served_term: int | None
    newest: SCN | None  # the newest SCN the other member holds


class Copier:
    def __init__(self, buffer: GroupBuffer, metastore: Any, client: Any, token: str | None) -> None:
        self._buffer = buffer
        self._metastore = metastore
        self._client = client
        self._token = token
        self._pages = RawStreams(client, token)  # streamed where the member serves streams

    def interrupt(self, why: str) -> None:
        """Hang up the copy under way, from any thread (the leader it reads changed)."""
        self._pages.interrupt(why)

    def copy_once(
        self,
        url: str,
        wait_ms: int,
        leader_term: int | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Copied:
        """One batch from ``url``. ``leader_term``: the leader's term as ZooKeeper names it
        (follower); None when a new leader catches up from any member before capture (the
        buffer's fence then checks the new leader's own lease and term).

        Raises drc.client.http.Transient or ProtocolError (try again or elsewhere),
        FencedError (a deposed server), FatalError (the member no longer holds what follows
        this buffer)."""
        if self._buffer.uncommitted:  # records a full disk kept from their commit: first
            self._buffer.commit()  # (BufferFullError while it is still full)
        after = self._buffer.resume_scn or SCN.ZERO
        try:
            page = self._pages.page(url, after, wait_ms, cancelled)
        except http.TooOld as exc:
            raise FatalError(
                f"{url} no longer holds the records after SCN {after} (it serves after "
                f"{exc.oldest}): this member cannot copy the gap. Move this buffer aside (a new "
                "member starts from the leader's oldest record) or raise retention"
            ) from exc
        if leader_term is not None:
            check_records(page.term, leader_term, self._buffer.term_file.term)
        if cancelled():  # the leader changed meanwhile: it may be silent now, ask no more
            raise http.Transient(f"stopped copying from {url}: the group's leader changed")
        if not page.records:
            return Copied(0, page.term, page.newest)
        entries = pull_history(self._client, url, after, page.records[-1].scn, self._token)
        self._metastore.import_entries([_entry(e, url) for e in entries])
        if leader_term is not None and page.term is not None:
            self._buffer.term_file.raise_to(page.term)  # FencedError if older than the buffer's
        self._buffer.append_many((r.scn, r.payload, r.timestamp_ms, r.more) for r in page.records)
        self._buffer.commit()
        return Copied(len(page.records), page.term, page.newest)

    def newest(self, url: str) -> SCN | None:
        """The last SCN the member at ``url`` holds (None: an empty buffer); raises
        drc.client.http.Transient (it does not answer) or ProtocolError."""
        return last_scn(self._client, url, self._token)


def _entry(e: Any, url: str) -> RawEntry:
    try:
        return RawEntry(
            e["db"], e["table"], SCN.parse(e["scn"]), e["kind"], e["columns"], e["statement"]
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"{url} sent a malformed history entry: {exc}") from exc


class LeaderUnavailableError(RetriableError):
    """A follower's back-to-source read could not be asked of the leader (none elected, or it
    did not answer); the API answers 503 and the reader tries again or asks another member."""


class ViaLeader:
    """``backfill(after, oldest, max_records, max_bytes)`` of a follower: the records after
    ``after`` up to its buffer's start ``oldest``, as the leader serves them (module docstring).

    ``leader_url`` names the leader's API (None: no leader known now)."""

    def __init__(
        self, client: Any, token: str | None, leader_url: Callable[[], str | None]
    ) -> None:
        self._client = client
        self._token = token
        self._leader_url = leader_url

    def __call__(self, after: SCN, oldest: SCN, max_records: int, max_bytes: int) -> list[Record]:
        url = self._leader_url()
        if url is None:
            raise LeaderUnavailableError("no leader is elected now to read the source binlog")
        try:
            page = pull_raw(
                self._client, url, after, pullquery.WAIT_NONE, self._token, max_records, max_bytes
            )
        except http.TooOld as exc:
            raise ScnTooOldError(f"the group's leader {url} answered: {exc}", oldest) from exc
        except (http.Transient, ProtocolError, ApiRequestError, ApiTlsError) as exc:
            raise LeaderUnavailableError(f"the group's leader {url}: {exc}") from exc
        out = [
            Record(r.scn, r.payload, r.timestamp_ms, r.more, SOURCE_SEGMENT, 0)
            for r in page.records
            if r.scn <= oldest  # from there on this buffer serves
        ]
        if not out and page.records:  # nothing between after and the buffer's start
            out.append(start_marker(oldest))
        return out
