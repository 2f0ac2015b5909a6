"""What the subscriber SDK raises, inside DRC's one exception tree (drc.core.errors).

    DrcError
    +-- RetriableError
    |   +-- ApiUnavailableError     no API URL answered in time (network down, 5xx); get() again
    |   +-- SegmentDownloadError    no intact copy of a segment after every attempt
    +-- FatalError
        +-- ApiRequestError         the server refused the request (400, 404, ...): fix the call
        |   +-- WaitTimeoutError    408 from /v1/wait: the GTID is not applied there yet
        |   +-- ApiAuthError        401/403: pass the right bearer token
        +-- BufferRebuiltError      409: the server's buffer is not the one this position came from
        +-- PositionTooOldError     410 from every URL (also a drc.core ScnTooOldError)
        +-- ProtocolError           a response that breaks the API contract (order, framing)
        +-- ApiTlsError             HTTPS refused: the server's certificate is not trusted (pass
        |                           the CA that signed it) or the handshake failed
        +-- AckError                ack of a batch that is not the one awaiting its ack
        +-- CheckpointError         a checkpoint file that cannot be read or written
        +-- FragmentError           fragments that cannot be assembled into one transaction

No message or repr carries the bearer token: errors name the URL, the status and the server's
own message only.
"""

from __future__ import annotations

from collections.abc import Mapping

from drc.core.errors import FatalError, RetriableError, ScnTooOldError
from drc.core.scn import SCN


class ApiUnavailableError(RetriableError):
    """No URL gave a usable answer within the caller's timeout.

    ``errors`` maps each URL to the last transient failure seen there (connection refused,
    timeout, 5xx). The subscriber keeps retrying in the background; calling get() again waits
    for it.
    """

    def __init__(self, message: str, errors: Mapping[str, str]) -> None:
        super().__init__(message)
        self.errors = dict(errors)


class ApiRequestError(FatalError):
    """The server answered with a 4xx the same request would get again.

    ``status`` is the HTTP status, ``code`` the server's error code (e.g. "bad_request") and
    ``server_message`` its explanation, included verbatim in the message.
    """

    def __init__(self, message: str, url: str, status: int, code: str, server_message: str):
        super().__init__(message)
        self.url = url
        self.status = status
        self.code = code
        self.server_message = server_message


class ApiAuthError(ApiRequestError):
    """401/403: the token is missing or wrong. Pass the token the server's [api] section lists."""


class WaitTimeoutError(ApiRequestError):
    """408 from ``GET /v1/wait`` (drc.client.waits.wait_for_gtid): the datacenter asked has not
    applied the GTID within the timeout. ``waiting_for`` says where its channel is (its state,
    lag and position in the GTID's domain); wait again, or read elsewhere."""

    def __init__(self, message: str, url: str, status: int, code: str, server_message: str,
                 waiting_for: str) -> None:  # fmt: skip
        super().__init__(message, url, status, code, server_message)
        self.waiting_for = waiting_for


class BufferRebuiltError(FatalError):
    """409: the URL's EventBuffer was wiped and rebuilt since this subscriber last read it.

    SCNs are assigned once by the leader, so continuing from the same SCN is normally safe; but a
    rebuilt buffer can also mean an operator restored or re-seeded the stream, so the SDK stops
    and lets the application decide: call ``Subscriber.accept_rebuilt_buffer()`` to continue
    from the same position, or start over from a snapshot. ``on_rebuild="continue"`` makes this
    automatic.
    """

    def __init__(self, message: str, url: str, expected: str, current: str | None, after: SCN):
        super().__init__(message)
        self.url = url
        self.expected = expected
        self.current = current
        self.after = after


class PositionTooOldError(ScnTooOldError):
    """410 from every URL: retention deleted the changes after this position on all of them.

    ``oldest`` is the oldest position the servers can resume after (the newest of the URLs'
    answers, or None if none said). The SDK never skips ahead on its own: catch up from a
    snapshot (drc catchup) and restart the subscriber after the snapshot's SCN.
    """

    def __init__(self, message: str, oldest: SCN | None, after: SCN) -> None:
        super().__init__(message, oldest)
        self.after = after


class ProtocolError(FatalError):
    """A response that breaks the API contract: bad framing, missing fields, SCNs out of order.

    Continuing could skip or reorder changes, so the subscriber stops; the message names the URL
    and the problem. Usually a client/server version mismatch or a proxy rewriting bodies.
    """


class AckError(FatalError, ValueError):
    """ack() of a batch that is not awaiting an ack: already acked, dropped by rollback(), or
    from another subscriber. Batches are acked once each, in the order get() returned them."""


class CheckpointError(FatalError):
    """A checkpoint file that cannot be read, parsed or written; the message names the file.

    A corrupt checkpoint is never treated as "start from zero": fix or remove it deliberately.
    """


class FragmentError(FatalError):
    """Fragments that do not form one transaction (a gap, a repeat, a missing last fragment), or
    a transaction larger than assemble()'s ``max_changes`` bound."""


class ApiTlsError(FatalError):
    """HTTPS to ``url`` was refused by TLS. Retrying cannot fix a certificate: trust the CA
    that signed the server's certificate (``ca=``, ``--ca``, a channel's ``tls_ca``)."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url


class SegmentDownloadError(RetriableError):
    """A segment download failed every attempt (network, or a copy whose SHA-256 is not the
    listed one). Nothing of it was used; another replicator or a later try may succeed."""

    def __init__(self, message: str, name: str, url: str) -> None:
        super().__init__(message)
        self.name = name
        self.url = url
