"""A partition whose log cannot be opened is offline on that broker: requests for it get
KAFKA_STORAGE_ERROR (as Kafka answers for the partitions of a failed log directory), not
UNKNOWN_TOPIC_OR_PARTITION, and the broker serves its other partitions."""

from __future__ import annotations

import shutil

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from support.clients import consume_all
from support.processes import BrokerProcess
from support.topics import create_topic


@pytest.fixture
def broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    yield proc
    proc.stop()


def latest_offset(bootstrap: str, topic: str, partition: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()},
                               request_timeout=10)
    return next(iter(found.values())).result(15).offset


def test_a_log_that_cannot_be_opened_answers_storage_error(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for partition in (0, 1):
        producer.produce(topic_name, b"before", partition=partition)
    assert producer.flush(30) == 0
    broker.stop()
    [directory] = broker.data_dir.rglob(f"{topic_name}-1")
    shutil.rmtree(directory)
    directory.write_bytes(b"not a log directory")
    broker.start()

    with pytest.raises(KafkaException) as raised:
        latest_offset(broker.bootstrap, topic_name, 1)
    assert raised.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, raised.value
    # The other partition is served as before.
    assert latest_offset(broker.bootstrap, topic_name, 0) == 1
    assert consume_all(broker.bootstrap, topic_name, 1) == [b"before"]
