"""The RabbitMQ sink: pika's BlockingConnection with publisher confirms.

Topology (declared, idempotently, on every connect)::

    exchange EXCHANGE (direct, durable)
      --routing key "0"--> queue PREFIX.0 (durable)
      --routing key "1"--> queue PREFIX.1
      ...                  PREFIX.(N-1)

A message goes to the queue of its partition's range (drc.sink.messages), persistent
(delivery mode 2), ``mandatory`` (a message no queue takes is an error, not a silent drop),
with ``message_id`` set to the change's id. With confirms on, pika's ``basic_publish`` returns
only once the broker confirmed the message (stored it on disk for a durable queue), so
``confirm`` has nothing left to wait for.

Changing the number of queues of an existing sink moves keys to other queues: consumers then see
one key in two queues, without an order between them. Drain the queues first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from urllib.parse import urlsplit

import pika
import pika.exceptions

from drc.sink.base import SinkRejectedError, SinkUnavailableError
from drc.sink.messages import Message

CONTENT_TYPE = "application/json"
PERSISTENT = 2


def queue_names(prefix: str, queues: int) -> list[str]:
    return [f"{prefix}.{index}" for index in range(queues)]


def shown_url(url: str) -> str:
    """The broker's address without user and password, for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class RabbitMQSink:
    """One connection and channel to a broker; see the module docstring for the topology."""

    def __init__(self, url: str, exchange: str, queue_prefix: str, queues: int) -> None:
        self.where = shown_url(url)
        self.exchange = exchange
        self._properties: dict[str, pika.BasicProperties] = {}
        try:
            params = pika.URLParameters(url)
        except ValueError as exc:  # pika's text may hold the URL: leave it out
            raise SinkRejectedError(
                f"the AMQP URL for {self.where} is malformed ({type(exc).__name__}); "
                "write it as amqp://USER:PASSWORD@HOST:PORT/VHOST"
            ) from None
        params.connection_attempts = 1  # the runner retries, with backoff and progress lines
        params.blocked_connection_timeout = 300.0
        with self._translated("connect to"):
            self._connection = pika.BlockingConnection(params)
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
            self._declare(queue_prefix, queues)

    def _declare(self, prefix: str, queues: int) -> None:
        self._channel.exchange_declare(self.exchange, exchange_type="direct", durable=True)
        for index, name in enumerate(queue_names(prefix, queues)):
            self._channel.queue_declare(name, durable=True)
            self._channel.queue_bind(name, self.exchange, routing_key=str(index))

    def publish(self, messages: Sequence[Message]) -> None:
        with self._translated("publish to"):
            if not messages:
                self._connection.process_data_events(0)  # heartbeats of an idle connection
            for message in messages:
                self._channel.basic_publish(
                    self.exchange,
                    str(message.queue),
                    message.body,
                    self._props(message),
                    mandatory=True,
                )

    def _props(self, message: Message) -> pika.BasicProperties:
        return pika.BasicProperties(
            content_type=CONTENT_TYPE,
            delivery_mode=PERSISTENT,
            message_id=message.message_id,
            timestamp=message.timestamp,
            type=message.op,
            headers={"partition": message.partition},
        )

    def confirm(self) -> None:
        """Nothing to wait for: each publish returned only once the broker confirmed it."""

    def close(self) -> None:
        try:
            if self._connection.is_open:
                self._connection.close()
        except pika.exceptions.AMQPError:
            pass  # closing a connection the broker already dropped

    def _translated(self, verb: str) -> AbstractContextManager[None]:
        return _translated(f"{verb} RabbitMQ at {self.where}")


@contextmanager
def _translated(doing: str) -> Iterator[None]:
    """pika's errors become the sink's: refusals are fatal, everything else retriable."""
    try:
        yield
    except pika.exceptions.UnroutableError as exc:
        raise SinkRejectedError(
            f"cannot {doing}: no queue took a message (a sink queue or its binding was "
            "deleted?); restart `drc sink` to declare them again"
        ) from exc
    except pika.exceptions.NackError as exc:
        raise SinkRejectedError(
            f"cannot {doing}: the broker refused a message (nack); see its log"
        ) from exc
    except pika.exceptions.ChannelClosedByBroker as exc:
        raise SinkRejectedError(
            f"cannot {doing}: the broker closed the channel ({exc.reply_code} "
            f"{exc.reply_text}); an exchange or queue of that name exists with other "
            "settings, or the user lacks permissions"
        ) from exc
    except pika.exceptions.ProbableAuthenticationError as exc:
        raise SinkRejectedError(
            f"cannot {doing}: the broker refused the user or password in the AMQP URL"
        ) from exc
    except (pika.exceptions.AMQPError, OSError) as exc:
        detail = str(exc) or "no answer"  # pika's connect errors often have no text
        raise SinkUnavailableError(
            f"cannot {doing}: {type(exc).__name__} ({detail}); is the broker running?"
        ) from exc
