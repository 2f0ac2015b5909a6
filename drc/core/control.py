"""What the pull API and a channel agree on when an operator acts on it (drc.api.control asks,
drc.apply.control and drc.apply.actions carry it out)."""

from __future__ import annotations


class ControlError(Exception):
    """A control request that cannot be carried out: ``status`` is the HTTP status to answer.

    Not a DrcError: nothing failed, the channel refused (a skip of a running channel, a rewind
    forward); the operator reads the message, looks again and asks differently."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status
