"""Idempotent producers of real clients, with Produce responses lost on the way back
(support/proxy.py): every retry is recognised, so each partition holds every record exactly
once, in the order sent; in every storage mode (support.storage_modes), on one broker whose
topics are of that mode (diskless: the batch coordinator deduplicates); also when the topic's
compression.type has the broker recompress every batch (the retry is rewritten again and
keeps its producer sequence)."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from support.proxy import ProduceDroppingProxy
from support.topics import create_topic

PARTITIONS = 3
ROUNDS = 15
PER_ROUND = 40
COUNT = ROUNDS * PER_ROUND


@pytest.fixture
def proxied_broker(storage_mode, broker_factory, s3_endpoint):
    """A broker that advertises the proxy, so clients reach it only through the proxy, which
    drops every third Produce response after the broker handled it."""
    proxy = ProduceDroppingProxy(drop_every=3)
    broker = broker_factory("--advertised-listener", f"127.0.0.1:{proxy.port}",
                            *storage_mode.single_broker_args(s3_endpoint))
    proxy.start(broker.port)
    yield proxy, broker
    proxy.close()


def produce_confluent_kafka(bootstrap: str, topic: str) -> None:
    # Each dropped response closes the connection: librdkafka's reconnect backoff doubles
    # with each (up to 10 s by default), which a diskless broker's slower rounds ran into
    # until a flush outlasted its 60 s.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 2, "retry.backoff.ms": 50,
                         "reconnect.backoff.max.ms": 500})
    failures = []
    for round_ in range(ROUNDS):
        for i in range(round_ * PER_ROUND, (round_ + 1) * PER_ROUND):
            producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS,
                             on_delivery=lambda err, _: err and failures.append(err))
        assert producer.flush(60) == 0
    assert not failures, failures


def produce_kafka_python(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=2,
                             retry_backoff_ms=50)
    for round_ in range(ROUNDS):
        futures = [producer.send(topic, f"v{i}".encode(), partition=i % PARTITIONS)
                   for i in range(round_ * PER_ROUND, (round_ + 1) * PER_ROUND)]
        for future in futures:
            future.get(60)
    producer.close()


def produce_aiokafka(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                    linger_ms=2, retry_backoff_ms=50)
        await producer.start()
        try:
            for round_ in range(ROUNDS):
                sends = [await producer.send(topic, f"v{i}".encode(), partition=i % PARTITIONS)
                         for i in range(round_ * PER_ROUND, (round_ + 1) * PER_ROUND)]
                await asyncio.gather(*sends)
        finally:
            await producer.stop()

    asyncio.run(run())


PRODUCERS = {"confluent-kafka": produce_confluent_kafka, "kafka-python": produce_kafka_python,
             "aiokafka": produce_aiokafka}


def read_partitions(bootstrap: str, topic: str) -> dict[int, list[tuple[int, str]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    found: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    while len(at_end) < PARTITIONS:
        m = consumer.poll(10)
        assert m is not None, "consumer timed out"
        if m.error() is not None:
            at_end.add(m.partition())
            continue
        found[m.partition()].append((m.offset(), m.value().decode()))
    consumer.close()
    return found


@pytest.mark.parametrize("client", list(PRODUCERS))
def test_retried_batches_are_stored_once(client, proxied_broker, topic_name):
    proxy, broker = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    create_topic(bootstrap, topic_name, PARTITIONS)
    PRODUCERS[client](bootstrap, topic_name)
    assert proxy.dropped >= 3, f"only {proxy.dropped} responses dropped: no retry was tested"

    stored = read_partitions(bootstrap, topic_name)
    for partition, records in stored.items():
        assert [offset for offset, _ in records] == list(range(len(records)))
        assert [value for _, value in records] == [
            f"v{i}" for i in range(COUNT) if i % PARTITIONS == partition], partition


def test_retried_recompressed_batches_are_stored_once(proxied_broker, topic_name):
    proxy, broker = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    create_topic(bootstrap, topic_name, PARTITIONS, config={"compression.type": "gzip"})
    produce_confluent_kafka(bootstrap, topic_name)
    assert proxy.dropped >= 3, f"only {proxy.dropped} responses dropped: no retry was tested"

    stored = read_partitions(bootstrap, topic_name)
    assert sum(len(records) for records in stored.values()) == COUNT
    for partition, records in stored.items():
        assert [offset for offset, _ in records] == list(range(len(records)))
