"""The sink's loop: pull a batch, publish its messages, wait for the broker's confirms, ack.

Positions: the subscriber's checkpoint is the SCN after the last batch whose every message the
broker confirmed (drc.client.subscriber: ``ack`` saves it). So:

- a kill of the sink (even -9) republishes, at most, the batch it was publishing: a consumer
  sees those messages twice, with the same ids, and drops the second copies;
- a broker that goes away (restart, kill -9, network) makes publishing fail: the sink closes
  the connection, reconnects with backoff, and publishes again from the first message not yet
  confirmed (messages are confirmed in chunks of ``confirm_every``; one in flight when the
  connection died may have been stored, and arrives twice).

Nothing is acked before it is confirmed, so nothing is lost; order within a queue is the stream's
because one connection publishes in order and republishes only from the unconfirmed point on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drc.client.subscriber import Batch, Subscriber
from drc.core.errors import RetriableError
from drc.sink.base import Sink, SinkUnavailableError
from drc.sink.keys import KeyCache
from drc.sink.messages import Message, transaction_messages

log = logging.getLogger("drc.sink")

CONFIRM_EVERY = 200


@dataclass
class SinkStats:
    """What the sink did since it started (progress lines)."""

    batches: int = 0
    transactions: int = 0
    messages: int = 0  # confirmed by the broker
    reconnects: int = 0
    last_error: str | None = None


class Backoff:
    """Doubling pauses from ``initial`` up to ``cap``; ``reset`` after a success."""

    def __init__(self, initial: float, cap: float, sleep: Callable[[float], None]) -> None:
        self.initial, self.cap, self._sleep = initial, cap, sleep
        self.next = initial

    def wait(self) -> None:
        self._sleep(self.next)
        self.next = min(self.next * 2, self.cap)

    def reset(self) -> None:
        self.next = self.initial


class SinkRunner:
    """Publishes what ``subscriber`` delivers through sinks ``connect`` makes (one at a time: a
    new one after the broker was lost). ``queues``: how many ranges the partitions are split in.
    """

    def __init__(
        self,
        subscriber: Subscriber,
        connect: Callable[[], Sink],
        keys: KeyCache,
        queues: int,
        *,
        confirm_every: int = CONFIRM_EVERY,
        backoff_initial: float = 0.2,
        backoff_max: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        if confirm_every < 1:
            raise ValueError(f"confirm_every must be >= 1, got {confirm_every}")
        self.subscriber = subscriber
        self.keys = keys
        self.queues = queues
        self.stats = SinkStats()
        self._connect = connect
        self._confirm_every = confirm_every
        self._backoff = Backoff(backoff_initial, backoff_max, sleep)
        self._on_retry = on_retry
        self._sink: Sink | None = None

    def run(self, stop: Callable[[], bool], timeout: float | None = None) -> None:
        """Until ``stop()`` is true (checked between batches). ``timeout`` bounds each pull's
        retries (None: forever); the subscriber's errors end the run."""
        while not stop():
            self.step(timeout)

    def step(self, timeout: float | None = None) -> Batch:
        """One batch: pulled, published, confirmed, acked. Returns it."""
        batch = self.subscriber.get(timeout)
        messages = self._retrying(lambda: self.messages(batch))
        self.deliver(messages)
        self.subscriber.ack(batch)
        self.stats.batches += 1
        self.stats.transactions += sum(1 for txn in batch.transactions if txn.last_fragment)
        return batch

    def messages(self, batch: Batch) -> list[Message]:
        """The batch's messages in stream order."""
        self.keys.serve_from(batch.url)
        out: list[Message] = []
        for txn in batch.transactions:
            self.keys.seen(txn)
            out.extend(transaction_messages(txn, self.keys, self.queues))
        return out

    def deliver(self, messages: Sequence[Message]) -> None:
        """Publish ``messages`` and return once the broker confirmed them all, reconnecting
        (with backoff, for as long as it takes) when the broker is lost."""
        done = 0  # messages confirmed so far
        while True:
            try:
                sink = self._sink = self._sink or self._connect()
                if not messages:
                    sink.publish(())  # keeps an idle connection alive
                    sink.confirm()
                while done < len(messages):
                    chunk = messages[done : done + self._confirm_every]
                    sink.publish(chunk)
                    sink.confirm()
                    done += len(chunk)
                    self.stats.messages += len(chunk)
                self._backoff.reset()
                return
            except SinkUnavailableError as exc:
                self._lost(exc)

    def _lost(self, exc: RetriableError) -> None:
        self.close_sink()
        self.stats.reconnects += 1
        self.stats.last_error = str(exc)
        text = f"{exc}; retrying in {self._backoff.next:.1f}s"
        if self._on_retry is not None:
            self._on_retry(text)
        else:
            log.warning("sink: %s", text)
        self._backoff.wait()

    def _retrying(self, build: Callable[[], list[Message]]) -> list[Message]:
        # Reading a table's key from the replicator may fail while it restarts.
        while True:
            try:
                messages = build()
            except SinkUnavailableError:
                raise
            except RetriableError as exc:
                if self._on_retry is not None:
                    self._on_retry(f"reading table keys: {exc}; retrying")
                self._backoff.wait()
                continue
            self._backoff.reset()
            return messages

    def close_sink(self) -> None:
        if self._sink is not None:
            sink, self._sink = self._sink, None
            sink.close()

    def close(self) -> None:
        """Close the broker connection; the subscriber is the caller's to close."""
        self.close_sink()
