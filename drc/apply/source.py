"""What a channel streams: the remote's changes after an SCN, and what of them it applies.

The selection is the config's filter chain (drc.apply.stages, built by the composition root)
and the snapshot windows (drc.apply.windows): tables a snapshot joined to the channel, whose
changes the copy holds are dropped. Tables a snapshot joined that the config's ``tables`` leave
out are subscribed too (``rejoin``); a reload (drc.apply.actions) replaces the selection.

The pull: a remote that does not answer is not an error (the subscriber fails over and
retries); the channel shows it disconnected (drc.apply.progress) and goes on polling. A remote
that no longer holds the channel's position (410), or whose buffer was rebuilt under it (409),
stops the channel with :class:`RemoteStreamLostError`, which says how to continue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from drc.api import pullquery
from drc.apply import windows
from drc.apply.actions import Restart
from drc.apply.engine import Converging
from drc.apply.osc_pending import ReplayOnlineSchemaChange
from drc.apply.progress import ChannelProgress
from drc.apply.stages import Chain, Stage
from drc.apply.target import Target
from drc.apply.windows import DropCopied
from drc.client import ApiUnavailableError
from drc.client.errors import ApiRequestError, BufferRebuiltError, PositionTooOldError
from drc.config_channels import ChannelConfig
from drc.core.errors import FatalError
from drc.core.events import Transaction
from drc.core.scn import SCN

log = logging.getLogger(__name__)

IDLE_POLL_S = 1.0  # how long one get() may block before the stop flag is looked at again
UNAVAILABLE_LOG_EVERY_S = 30.0


class RemoteStreamLostError(FatalError):
    """The remote cannot continue the channel's stream from its checkpoint: its buffer was
    rebuilt (moved aside and started again, after a purged binlog or damage), or no longer
    holds the position. The message says what to do (docs/operations.md, Binlog purged)."""


def _stream_lost(name: str, exc: BufferRebuiltError | PositionTooOldError) -> RemoteStreamLostError:
    copy = (
        f"copy the channel's tables again: empty them on this target without writing the "
        f"binlog (SET SESSION sql_log_bin = 0), run `drc snapshot --channel {name}` (it starts "
        f"the channel at the copy), then `drc channel resume {name}` (docs/operations.md, "
        "Binlog purged)"
    )
    if isinstance(exc, BufferRebuiltError):
        return RemoteStreamLostError(
            f"channel {name}: the buffer of {exc.url} was rebuilt (epoch {exc.expected} -> "
            f"{exc.current}) while this channel read it after {exc.after}. If that replicator "
            f"was started again on an empty buffer, the changes in between never reach this "
            f"datacenter: {copy}. If the buffer was rebuilt without loss (copied again from "
            f"another member of its group), `drc channel resume {name}` continues"
        )
    return RemoteStreamLostError(
        f"channel {name}: the remote no longer holds the changes after {exc.after} (its "
        f"oldest: {exc.oldest}); the channel never skips ahead: {copy}"
    )


class SubscriberLike(Protocol):
    def get(self, timeout: float | None = None) -> Any: ...

    def ack(self, batch: Any) -> None: ...

    def close(self) -> None: ...


Subscribe = Callable[[SCN], SubscriberLike]  # the remote stream, after an SCN
# The filter chain and subscription of a config with more source tables (those a snapshot
# joined to the channel that its ``tables`` do not name).
Rejoin = Callable[[ChannelConfig, Sequence[str]], tuple[Sequence[Stage], Subscribe]]


class ChannelSource:
    """Used by the channel's thread only."""

    def __init__(
        self,
        channel: ChannelConfig,
        target: Target,
        filters: Sequence[Stage],
        subscribe: Subscribe,
        progress: ChannelProgress,
        *,
        rejoin: Rejoin | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel = channel  # the config the selection follows, as last reloaded
        self.target = target
        self.copied = DropCopied()
        self._rejoin = rejoin
        self._progress = progress
        self._clock = clock
        self._unavailable_logged = -UNAVAILABLE_LOG_EVERY_S
        self._select(filters, subscribe)

    def _select(self, filters: Sequence[Stage], subscribe: Subscribe) -> None:
        self.filters = Chain(filters)  # the config's: counts the DDL they leave out
        self.chain = Chain([*filters, self.copied])
        self._subscribe = subscribe

    @property
    def ddl_skipped(self) -> int:
        return self.filters.ddl_skipped

    @property
    def converging(self) -> Converging | None:
        """The joined tables' changes a later chunk of their copy may hold (applied without
        conflict detection), if any."""
        return self.copied.windows.converging if self.copied.windows else None

    def load_state(self) -> None:
        """What stages keep in the target, read again (drc.apply.osc_pending): the stream is
        taken after the checkpoint, so they must hold the state as of it."""
        for stage in self.filters.stages:
            if isinstance(stage, ReplayOnlineSchemaChange):
                stage.load(self.target)

    def after_ddl_chain(self, txn: Transaction) -> Transaction | None:
        """A DDL step of bulk catch-up, read through its executors' ddl_chain
        (drc.catchup.executor), through the rest of the chain: the stages from the one
        replaying online schema changes on (none: ``txn`` as it is)."""
        stages = self.filters.stages
        for cut, stage in enumerate(stages):
            if isinstance(stage, ReplayOnlineSchemaChange):
                return Chain(stages[cut:])(txn)
        return txn

    # ------------------------------------------------------------------ the pull

    @contextmanager
    def opened(self, after: SCN) -> Iterator[SubscriberLike]:
        """The remote's stream after ``after``, closed when done."""
        subscriber = self._subscribe(after)
        try:
            yield subscriber
        finally:
            subscriber.close()

    def get(self, subscriber: SubscriberLike, due_in: float | None) -> Any:
        """The next batch, or None: nothing came before ``due_in`` seconds (the open group's
        delay; None: no group open) or IDLE_POLL_S, or the remote is unavailable."""
        timeout = IDLE_POLL_S if due_in is None else min(due_in, IDLE_POLL_S)
        try:
            return subscriber.get(timeout=timeout)
        except (BufferRebuiltError, PositionTooOldError) as exc:
            raise _stream_lost(self.channel.name, exc) from exc
        except ApiRequestError as exc:
            if exc.status != 400 or not exc.server_message.startswith(pullquery.PARAM_WITHIN):
                raise
            # The place inside a large transaction is not one the remote has (a member that
            # stores it in other fragments): take it again from its start, after the checkpoint.
            log.warning("channel %s: %s; taking the transaction again from its start",
                        self.channel.name, exc)  # fmt: skip
            raise Restart() from exc
        except ApiUnavailableError as exc:
            now = self._clock()
            self._progress.unanswered(now, str(exc) if exc.errors else None)
            if exc.errors and now - self._unavailable_logged >= UNAVAILABLE_LOG_EVERY_S:
                self._unavailable_logged = now
                log.warning("channel %s: remote API unavailable, retrying: %s",
                            self.channel.name, exc)  # fmt: skip
            return None

    # ------------------------------------------------------------------ the selection

    def read_windows(self) -> bool:
        """The tables snapshots joined to the channel, read again; True when they changed."""
        name = self.channel.name
        rows = self.target.query(windows.select(name), "reading the snapshot tables")
        found = windows.parse(rows)
        if found.by_target == self.copied.windows.by_target:
            return False
        self.copied.windows = found
        self._join_tables()
        log.info("channel %s: tables joined by snapshots: %s", name,
                 ", ".join(found.source_names()) or "none")  # fmt: skip
        return True

    def reselect(
        self, config: ChannelConfig, filters: Sequence[Stage], subscribe: Subscribe
    ) -> None:
        """Stream with a new config's table selection (a reload)."""
        self.channel = config
        self._select(filters, subscribe)
        self._join_tables()

    def _join_tables(self) -> None:
        """Select the joined tables the config's ``tables`` leave out (their changes would
        otherwise not even be pulled)."""
        extra = windows.unselected(self.channel, self.copied.windows)
        if not extra or self._rejoin is None:
            return
        self._select(*self._rejoin(self.channel, extra))
