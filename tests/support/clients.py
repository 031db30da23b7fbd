"""Reading and writing partitions with confluent-kafka, for tests that check what was stored."""

from __future__ import annotations

import threading
import time
from collections import Counter


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


class AckedProducer(threading.Thread):
    """An idempotent acks=all producer sending "v<i>" until stopped; keeps every ack with
    the time it arrived."""

    def __init__(self, bootstrap: str, topic: str, az: str,
                 config: dict[str, str | int] | None = None) -> None:
        from confluent_kafka import Producer
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"writer az={az}",
                                  "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                  "metadata.max.age.ms": 1000, "topic.metadata.refresh.interval.ms": 1000,
                                  **(config or {})})
        self.topic = topic
        self.acked: list[tuple[float, int, bytes]] = []
        self.errors: list = []  # confluent_kafka.KafkaError of each failed delivery
        self.stopping = threading.Event()

    def _on_delivery(self, error, message) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.acked.append((time.monotonic(), message.offset(), message.value()))

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            self.producer.produce(self.topic, f"v{i}".encode(), partition=0,
                                  on_delivery=self._on_delivery)
            self.producer.poll(0.002)
            i += 1

    def acks_per_second(self, start: float, end: float) -> float:
        """Acknowledgements that arrived in [start, end) (time.monotonic), per second."""
        return sum(start <= at < end for at, _, _ in self.acked) / (end - start)

    def finish(self) -> None:
        self.stopping.set()
        self.join(10)
        assert self.producer.flush(120) == 0


def assert_acked_exactly_once(bootstrap: str, topic: str, writer: AckedProducer) -> None:
    """Every acknowledged record is stored once, and no offset was assigned twice."""
    # Deliveries without an offset (None, -1) carry none a broker gave: librdkafka reported
    # them delivered without one (seen once, two records, while an AZ was cut off and the
    # producer retried). Whether they were stored once is checked below.
    twice = sorted(offset for offset, n in Counter(o for _, o, _ in writer.acked).items()
                   if n > 1 and offset is not None and offset >= 0)
    assert not twice, f"offsets assigned twice: {twice[:10]} ({len(twice)} in all)"
    stored = consume_all(bootstrap, topic, len(writer.acked))
    duplicates = [v for v, n in Counter(stored).items() if n > 1]
    assert not duplicates, f"stored twice: {duplicates[:5]}"
    missing = {value for _, _, value in writer.acked} - set(stored)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"


def produce_once(bootstrap: str, topic: str, request_timeout_ms: int) -> tuple[float, object]:
    """Produce one record (acks=all) without retries: the seconds until it was answered, and
    its confluent_kafka.KafkaError (None once acknowledged)."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "probe az=az2",
                         "retries": 0, "acks": "all", "request.timeout.ms": request_timeout_ms})
    outcome: list = []
    started = time.monotonic()
    producer.produce(topic, b"probe", partition=0,
                     on_delivery=lambda error, _: outcome.append((time.monotonic(), error)))
    producer.flush(60)
    (answered_at, error), = outcome
    return answered_at - started, error
