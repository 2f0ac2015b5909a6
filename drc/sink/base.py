"""The interface every broker adapter implements, and the sink's errors.

Errors::

    DrcError
    +-- SinkUnavailableError (RetriableError)  the broker is unreachable or dropped the
    |                                          connection: reconnect and publish again
    +-- SinkRejectedError (FatalError)         the broker refused a message (nack, unroutable:
                                               a queue was deleted): retrying will not help
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from drc.core.errors import FatalError, RetriableError
from drc.sink.messages import Message


class SinkUnavailableError(RetriableError):
    """The broker cannot be reached or closed the connection; what was published since the
    last confirm may or may not be stored, so it is published again after reconnecting."""


class SinkRejectedError(FatalError):
    """The broker refused a message; the text says which and what to check."""


class Sink(Protocol):
    """A broker connection that publishes messages and says when they are safely stored.

    ``publish`` sends the messages in order (an empty sequence keeps an idle connection alive);
    ``confirm`` returns only once the broker confirmed every message published so far, and
    raises instead if any may be lost. A sink is not reused after an error: close it and make
    a new one.
    """

    def publish(self, messages: Sequence[Message]) -> None: ...

    def confirm(self) -> None: ...

    def close(self) -> None: ...
