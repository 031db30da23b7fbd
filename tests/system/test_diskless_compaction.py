"""Compaction of a diskless topic with real clients: the writable coordinator's broker
compacts it, consumers (confluent-kafka, kafka-python) read the latest value of each key at
its original offset, and after a kill -9 of that broker the new coordinator finishes."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition
from support.diskless import FAST_HOUSEKEEPING, DisklessCluster
from support.topics import create_topic
from support.wait import wait_until

KEYS, VERSIONS = 200, 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_endpoint):
    cluster = DisklessCluster(tmp_path_factory.mktemp("compaction"), s3_endpoint,
                              broker_env=FAST_HOUSEKEEPING).start()
    yield cluster
    cluster.stop()


def produce(bootstrap: str, topic: str, versions: range) -> dict[bytes, int]:
    """Every key in each version, one flush per version; the offset of each key's last."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    offsets = {}

    def acked(error, message):
        assert error is None
        offsets[message.key()] = max(offsets.get(message.key(), -1), message.offset())
    for version in versions:
        for key in range(KEYS):
            producer.produce(topic, f"v{version}".encode(), f"k{key}".encode(), partition=0,
                             on_delivery=acked)
        assert producer.flush(30) == 0
    producer.produce(topic, b"h", b"head", partition=0)  # the log's last batch: not cleaned
    assert producer.flush(30) == 0
    return offsets


def read_confluent(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records = []
    try:
        while not records or records[-1][0] < end - 1:
            message = consumer.poll(5)
            assert message is not None and not message.error()
            records.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return records


def read_kafka_python(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    partition = KafkaPythonPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    records = []
    for message in consumer:
        records.append((message.offset, message.key, message.value))
        if message.offset >= end - 1:
            break
    consumer.close()
    return records


def cleaned_offset(cluster: DisklessCluster, topic_id: str) -> int:
    rows = cluster.coordinator_rows("SELECT cleaned_offset FROM logs WHERE topic_id = ?",
                                    (topic_id,))
    return rows[0][0] if rows else 0


def test_compacted_topic_keeps_the_latest_value_per_key(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, config={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
        "retention.ms": "1"})  # compact only: retention does not apply
    latest = produce(cluster.bootstrap, topic_name, range(VERSIONS))
    topic_id, end = cluster.topic_id(topic_name), KEYS * VERSIONS + 1
    wait_until(lambda: cleaned_offset(cluster, topic_id) == end - 1, 60, 0.5)
    expected = sorted((offset, key, f"v{VERSIONS - 1}".encode())
                      for key, offset in latest.items()) + [(end - 1, b"head", b"h")]
    assert read_confluent(cluster.bootstrap, topic_name, end) == expected
    assert read_kafka_python(cluster.bootstrap, topic_name, end) == expected
    # kill -9 the coordinator's broker while a new round is to be compacted: the new
    # coordinator compacts it, and the log reads whole.
    coordinator = cluster.leader_of("__diskless-metadata")
    more = produce(cluster.bootstrap, topic_name, range(VERSIONS, VERSIONS + 2))
    cluster.brokers[coordinator].kill()
    old_head, end = end - 1, end + 2 * KEYS + 1
    wait_until(lambda: cleaned_offset(cluster, topic_id) == end - 1, 90, 0.5)
    # The old head stays: the new one, in the log's last batch, is not cleaned yet.
    expected = [(old_head, b"head", b"h")] + sorted(
        (offset, key, f"v{VERSIONS + 1}".encode()) for key, offset in more.items()) + [(end - 1, b"head", b"h")]
    assert read_confluent(cluster.bootstrap, topic_name, end) == expected
