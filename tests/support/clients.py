"""Reading and writing partitions with confluent-kafka, for tests that check what was stored."""

from __future__ import annotations

import time


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60,
                config: dict[str, str] | None = None) -> list[bytes]:
    """Values of partition 0 from offset 0: ``expected`` of them, plus any extra that
    arrive within a further second (a duplicate would show up there)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **(config or {})})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
        while (message := consumer.poll(1.0)) is not None:
            if not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    return values


class ConfluentWriter:
    """An idempotent acks=all confluent-kafka producer that records what was acknowledged."""

    def __init__(self, bootstrap: str, linger_ms: int = 2) -> None:
        from confluent_kafka import Producer
        self.acked: list[bytes] = []
        self.failed = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": linger_ms,
                                  "message.timeout.ms": 120_000})

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.append(message.value())
        else:
            self.failed += 1

    def send(self, topic: str, *values: bytes) -> None:
        for value in values:
            self.producer.produce(topic, value, partition=0, on_delivery=self._delivered)
            self.producer.poll(0)

    def flush(self, timeout: float = 120) -> int:
        """Wait for every outstanding delivery report; the number still undelivered."""
        return self.producer.flush(timeout)
