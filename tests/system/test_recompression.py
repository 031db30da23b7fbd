"""A topic's compression.type in every storage mode, as real clients see it: batches produced
uncompressed or with another codec are stored with the topic's codec (the leader, or for
diskless the broker taking the produce, rewrites them: storage.append_rules), and consumers of
three clients read the same records. Every codec is covered at the storage layer
(tests/storage/test_append_rules.py); idempotent retries of recompressed batches are
deduplicated in tests/system/test_idempotent_producer.py."""

from __future__ import annotations

from confluent_kafka import Producer

from protocol.compression import CODECS
from support.raw import fetch_codecs
from support.topics import create_topic
from support.transactions import read_confluent_kafka, read_kafka_python, read_kafkajs

PER_CODEC = 20
PRODUCER_CODECS = ("none", "lz4")
READERS = {"confluent-kafka": read_confluent_kafka, "kafka-python": read_kafka_python,
           "kafkajs": read_kafkajs}


def test_batches_are_stored_with_the_topics_codec(storage_mode, topic_name, kafkajs):
    create_topic(storage_mode.bootstrap, topic_name,
                 replication_factor=storage_mode.replication_factor,
                 config={"compression.type": "zstd"})
    values = []
    for codec in PRODUCER_CODECS:
        producer = Producer({"bootstrap.servers": storage_mode.bootstrap, "acks": "all",
                             "compression.type": codec, "linger.ms": 5})
        batch = [f"{codec}-{i}-".encode() * 20 for i in range(PER_CODEC)]
        for value in batch:
            producer.produce(topic_name, value, partition=0)
        assert producer.flush(30) == 0
        values += batch

    codecs = fetch_codecs(storage_mode.bootstrap, topic_name)
    assert codecs and set(codecs) == {CODECS["zstd"]}
    for client, read in READERS.items():
        assert read(storage_mode.bootstrap, topic_name, "read_uncommitted",
                    len(values)) == values, client
