"""Several broker connections publishing at once, each queue still through exactly one of them.

A confirming publisher waits for each message's confirm (for a durable queue, the broker's
write to disk) before the next: one connection publishes a message per round trip. N
connections wait side by side, and the broker writes their messages together. Connection ``i``
takes the queues ``q`` with ``q % N == i``, in the order given, so a queue's messages keep the
stream's order; there is no order between queues to keep (drc.sink.messages).

Each connection lives in a thread of its own (pika's connections are not thread-safe):
``publish`` hands each its share and returns; ``confirm`` waits for all of them and raises the
first failure (a refusal before a lost connection). After a failure the whole sink is closed and
a new one made, as for any sink; what one connection confirmed before another failed is
published again, with its ids (at least once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from drc.sink.base import Sink, SinkRejectedError
from drc.sink.messages import Message


class ParallelSink:
    """``connections`` sinks made by ``connect``, each used only by its own thread."""

    def __init__(self, connect: Callable[[], Sink], connections: int) -> None:
        if connections < 1:
            raise ValueError(f"connections must be >= 1, got {connections}")
        self._threads = [
            ThreadPoolExecutor(1, thread_name_prefix=f"drc-sink-{i}") for i in range(connections)
        ]
        self._pending: list[Future[None]] = []
        made = [thread.submit(connect) for thread in self._threads]
        self._sinks: list[Sink | None] = []
        failure: BaseException | None = None
        for future in made:
            try:
                self._sinks.append(future.result())
            except BaseException as exc:  # close the connections made, then fail
                self._sinks.append(None)
                failure = failure or exc
        if failure is not None:
            self.close()
            raise failure

    def publish(self, messages: Sequence[Message]) -> None:
        count = len(self._threads)
        shares: list[list[Message]] = [[] for _ in range(count)]
        for message in messages:
            shares[message.queue % count].append(message)
        for index, share in enumerate(shares):
            if share or not messages:  # an empty publish keeps every connection alive
                self._pending.append(self._threads[index].submit(self._publish, index, share))

    def _publish(self, index: int, messages: Sequence[Message]) -> None:
        sink = self._sinks[index]
        assert sink is not None
        sink.publish(messages)
        sink.confirm()

    def confirm(self) -> None:
        pending, self._pending = self._pending, []
        failures = [exc for future in pending if (exc := future.exception()) is not None]
        if failures:
            refused = [exc for exc in failures if isinstance(exc, SinkRejectedError)]
            raise (refused or failures)[0]

    def close(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pending = []
        for thread, sink in zip(self._threads, self._sinks, strict=False):
            if sink is not None:
                thread.submit(sink.close).result()
        for thread in self._threads:
            thread.shutdown(wait=True)
