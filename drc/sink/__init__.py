"""The message-queue sink: a replicator's change stream published to a broker, one message per
row change, routed by the key's logical partition so per-key order holds (``drc sink``).

:mod:`drc.sink.messages` builds the messages (pure), :mod:`drc.sink.base` is the small
interface a broker adapter implements (:mod:`drc.sink.rabbitmq`: RabbitMQ through pika; a Kafka
sink would be one more class), and :mod:`drc.sink.runner` moves the subscriber's checkpoint only
once the broker confirmed every message before it.
"""
