"""A committed batch whose WAL object is gone (deleted behind the cluster's back): the
fetch answers an error the client surfaces (UNKNOWN_SERVER_ERROR, as Kafka answers a missing
remote segment; KAFKA_STORAGE_ERROR would be retried silently forever), the broker logs the
bucket/key and partition at ERROR once however often the client retries, and counts every
such read in kipper_objectstore_missing_object_reads."""

from __future__ import annotations

import time
import urllib.request

import kafka
import kafka.errors
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from storage.objectstore import WAL_BUCKET
from support.topics import create_topic

RECORDS = 10
# The producer's broker (az1) keeps what it uploaded in its read cache; the consumer's (az2)
# must read the object.
PRODUCER = {"client.id": "producer az=az1", "acks": "all"}
CONSUMER = {"client.id": "consumer az=az2", "client.rack": "az2"}


def fetch_errors(bootstrap: str, topic: str, seconds: float) -> tuple[list[KafkaError], int]:
    """The errors a confluent-kafka consumer's poll returns over ``seconds``, and how many
    records it got."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"missing-{topic}",
                         "enable.auto.commit": False, **CONSUMER})
    consumer.assign([TopicPartition(topic, 0, 0)])
    errors, records = [], 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                errors.append(message.error())
            else:
                records += 1
    finally:
        consumer.close()
    return errors, records


def test_missing_object_is_surfaced_logged_once_and_counted(diskless_cluster, topic_name):
    create_topic(diskless_cluster.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": diskless_cluster.bootstrap, **PRODUCER})
    for i in range(RECORDS):
        producer.produce(topic_name, f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    keys = diskless_cluster.object_keys(topic_name)
    assert keys
    diskless_cluster.delete_objects(keys)

    errors, records = fetch_errors(diskless_cluster.bootstrap, topic_name, 6)
    print(f"\nconsumer of a topic whose object is gone: {records} records, errors "
          f"{sorted({e.name() for e in errors})} ({len(errors)} times)")
    assert records == 0
    assert errors and {e.code() for e in errors} == {KafkaError.UNKNOWN}
    # kafka-python raises it from poll (KAFKA_STORAGE_ERROR it would retry at debug level).
    consumer = kafka.KafkaConsumer(bootstrap_servers=diskless_cluster.bootstrap,
                                   client_id=CONSUMER["client.id"], enable_auto_commit=False)
    consumer.assign([kafka.TopicPartition(topic_name, 0)])
    consumer.seek(kafka.TopicPartition(topic_name, 0), 0)
    try:
        with pytest.raises(kafka.errors.UnknownError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                assert not consumer.poll(500)
    finally:
        consumer.close()

    lines = {broker.node_id: [line for line in broker.log_path.read_text().splitlines()
                              if "ERROR" in line and any(key in line for key in keys)]
             for broker in diskless_cluster.brokers}
    reads = {broker.node_id: broker.metrics_json().get("objectstore_missing", {})
             .get("reads", {}).get(WAL_BUCKET, 0) for broker in diskless_cluster.brokers}
    print(f"ERROR lines naming the object per broker: { {n: len(v) for n, v in lines.items()} }; "
          f"missing-object reads per broker: {reads}")
    serving = [node for node, n in reads.items() if n]
    assert serving
    for node in serving:
        # The client retried; the broker said it once, with the partition.
        assert len(lines[node]) == 1, lines[node]
        assert f"{topic_name}-0" in lines[node][0] and WAL_BUCKET in lines[node][0]
    assert sum(reads.values()) >= 2
    prometheus = urllib.request.urlopen(
        diskless_cluster.brokers[serving[0]].metrics_url + "/metrics", timeout=10).read().decode()
    assert f'kipper_objectstore_missing_object_reads_total{{bucket="{WAL_BUCKET}"}}' in prometheus
