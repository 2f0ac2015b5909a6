"""The sandbox RabbitMQ broker of the integration tests, and reading what the sink published."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika

from drc.sandbox import rabbitmq
from drc.sandbox.rabbitmq import RabbitInfo
from drc.sink.rabbitmq import queue_names


class Broker:
    """One broker for the session; ``kill`` and ``restart`` keep its ports, data and URL."""

    def __init__(self, info: RabbitInfo) -> None:
        self.info = info

    @property
    def url(self) -> str:
        return self.info.amqp_url

    def kill(self) -> None:
        rabbitmq.kill(self.info)

    def restart(self) -> None:
        self.info = rabbitmq.start(Path(self.info.base), self.info)

    def stop(self) -> None:
        rabbitmq.stop(self.info)


@dataclass(frozen=True)
class Received:
    queue: int
    message_id: str
    body: dict[str, Any]
    persistent: bool
    content_type: str | None


def drain(url: str, prefix: str, queues: int, idle_s: float = 2.0) -> list[Received]:
    """Every message in the sink's queues, queue by queue in queue order, acknowledged."""
    out: list[Received] = []
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=500)
        for index, name in enumerate(queue_names(prefix, queues)):
            for method, props, body in channel.consume(name, inactivity_timeout=idle_s):
                if method is None:
                    break
                out.append(Received(index, props.message_id, json.loads(body),
                                    props.delivery_mode == 2, props.content_type))  # fmt: skip
                channel.basic_ack(method.delivery_tag)
            channel.cancel()
    finally:
        connection.close()
    return out


def queued(url: str, prefix: str, queues: int) -> int:
    """How many messages the sink's queues hold now (declared as the sink declares them, so
    asking before the sink started is not an error)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        return sum(
            channel.queue_declare(name, durable=True).method.message_count
            for name in queue_names(prefix, queues)
        )
    finally:
        connection.close()
