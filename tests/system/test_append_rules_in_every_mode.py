"""The append rules (storage.append_rules) hold in every storage mode, as real clients see
them: a record batch over the topic's max.message.bytes is refused with MESSAGE_TOO_LARGE
and nothing of it is stored; message.timestamp.type=LogAppendTime stamps the broker's time.
(The batch checks that need no topic config, CRC and magic, are the produce handler's, before
any mode is involved: tests/broker/test_bad_input.py.)"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaProducer
from kafka.errors import MessageSizeTooLargeError

from support.clients import consume_all
from support.topics import create_topic

LIMIT = 1000


def test_a_record_over_max_message_bytes_is_refused(storage_mode, topic_name):
    create_topic(storage_mode.bootstrap, topic_name,
                 replication_factor=storage_mode.replication_factor,
                 config={"max.message.bytes": str(LIMIT)})
    # Random bytes: a batch of 5,000 bytes of them stays over the limit whatever the codec.
    oversized = os.urandom(5 * LIMIT)

    kafka_python = KafkaProducer(bootstrap_servers=storage_mode.bootstrap, acks="all")
    try:
        with pytest.raises(MessageSizeTooLargeError):
            kafka_python.send(topic_name, oversized, partition=0).get(timeout=30)
    finally:
        kafka_python.close()

    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": storage_mode.bootstrap, "acks": "all",
                         "message.max.bytes": 10 * LIMIT})
    for value in (oversized, b"small"):
        producer.produce(topic_name, value, partition=0,
                         on_delivery=lambda error, _: errors.append(error))
        assert producer.flush(30) == 0
    assert [e.code() if e else None for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE, None]
    # Only the record within the limit was stored.
    assert consume_all(storage_mode.bootstrap, topic_name, 1) == [b"small"]


def test_log_append_time_stamps_the_brokers_time(storage_mode, topic_name):
    create_topic(storage_mode.bootstrap, topic_name,
                 replication_factor=storage_mode.replication_factor,
                 config={"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": storage_mode.bootstrap, "acks": "all"})
    producer.produce(topic_name, b"stamped", partition=0, timestamp=1_000)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": storage_mode.bootstrap, "group.id": topic_name,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    try:
        message = None
        deadline = time.monotonic() + 30
        while (message is None or message.error()) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
    finally:
        consumer.close()
    assert message is not None and not message.error()
    kind, stamp = message.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and stamp >= before_ms
