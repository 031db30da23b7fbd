"""What a real client (confluent-kafka) is told when the ACLs refuse it."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaError, Producer


def produce_error(client: dict[str, str], topic: str) -> KafkaError | None:
    """What the producer's delivery report says of one message to ``topic``; ``client``:
    the client configuration (bootstrap.servers, and the security settings if any)."""
    outcome: list = []
    producer = Producer({**client, "message.timeout.ms": 10_000})
    producer.produce(topic, b"v", on_delivery=lambda error, _: outcome.append(error))
    producer.flush(20)
    assert len(outcome) == 1
    return outcome[0]


def consume_error(client: dict[str, str], topic: str, group: str | None = None
                  ) -> KafkaError | None:
    """The first error a consumer of ``topic`` in ``group`` sees, or None once it reads a
    message."""
    consumer = Consumer({**client, "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        for _ in range(30):
            message = consumer.poll(1)
            if message is None:
                continue
            return message.error()
        raise AssertionError("the consumer saw neither a message nor an error")
    finally:
        consumer.close()
