"""Checkpoints of the diskless batch coordinator's state in a running cluster: the coordinator
checkpoints to object storage and every replica deletes ``__diskless-metadata-0`` below the
checkpoints; a broker killed with SIGKILL whose database is then deleted restores the newest
checkpoint, applies the log after it (its prefix is gone) and serves every record, read
through it by confluent-kafka and kafka-python."""

from __future__ import annotations

import sqlite3

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from support.clients import consume_all
from support.diskless import DisklessCluster
from support.topics import create_topic
from support.wait import wait_until

DATABASE = "diskless-coordinator.sqlite"


@pytest.fixture
def cluster(tmp_path, s3_endpoint):
    cluster = DisklessCluster(tmp_path, s3_endpoint, broker_env={
        "KIPPER_DISKLESS_COORDINATOR_CHECKPOINT_INTERVAL_RECORDS": "15",
        "KIPPER_DISKLESS_APPEND_COMMIT_INTERVAL_MS": "20"})
    yield cluster.start()
    cluster.stop()


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})
    for i in range(start, start + n):
        producer.produce(topic, str(i).encode(), partition=0)
        if i % 10 == 9:
            producer.flush(30)  # one WAL commit, one coordinator record, every ten records
    assert producer.flush(30) == 0


def coordinator(broker) -> dict:
    return broker.metrics_json()["diskless"]["coordinator"]


def batches(broker) -> list[tuple]:
    with sqlite3.connect(f"file:{broker.data_dir / DATABASE}?mode=ro", uri=True) as db:
        return db.execute("SELECT topic_id, partition, base_offset, last_offset, object_key "
                          "FROM batches ORDER BY topic_id, partition, base_offset").fetchall()


def consume_with_kafka_python(bootstrap: str, topic: str, az: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=f"reader;az={az}",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    consumer.assign([KafkaTopicPartition(topic, 0)])
    try:
        return [message.value for message in consumer]
    finally:
        consumer.close()


def test_a_lost_database_is_rebuilt_from_a_checkpoint_and_the_tail(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, 1, 1)
    produce(cluster.bootstrap, topic_name, 0, 400)
    # Two checkpoints or more: every replica's log starts past 0.
    wait_until(lambda: all(coordinator(b)["metadata_log_start_offset"] > 0
                           for b in cluster.brokers), timeout=60, interval=0.5)
    leader = cluster.leader_of("__diskless-metadata")
    lost = next(b for b in cluster.brokers if b.node_id != leader)
    lost.kill()
    for path in lost.data_dir.glob(DATABASE + "*"):
        path.unlink()
    produce(cluster.bootstrap, topic_name, 400, 100)  # the tail it has not seen
    lost.start()

    restored = wait_until(lambda: (lambda c: c if c["restored_checkpoint_offset"] >= 0
                                   else None)(coordinator(lost)), timeout=30, interval=0.5)
    assert restored["restored_checkpoint_offset"] >= restored["metadata_log_start_offset"] - 1 > 0
    print(f"restored checkpoint {restored['restored_checkpoint_offset']} in "
          f"{restored['restore_seconds']:.3f} s; log starts at "
          f"{restored['metadata_log_start_offset']}")
    other = cluster.brokers[leader]
    wait_until(lambda: batches(lost) == batches(other), timeout=30, interval=0.5)

    expected = [str(i).encode() for i in range(500)]
    az = f"az{lost.node_id + 1}"  # read through the restarted broker
    assert consume_all(lost.bootstrap, topic_name, 500,
                       config={"client.id": f"reader;az={az}", "client.rack": az}) == expected
    assert consume_with_kafka_python(lost.bootstrap, topic_name, az) == expected
    served = lost.metrics_json()["network"]["server"]
    assert any(row["class"] == "fetch-consumer" and row["bytes"] > 0 for row in served)
