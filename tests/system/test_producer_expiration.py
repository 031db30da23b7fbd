"""producer.id.expiration.ms in classic and diskless topics: an idempotent confluent-kafka
producer idle past it is forgotten by the partition (DescribeProducers no longer lists it),
and its next records are accepted and read once each (kafka-python)."""

from __future__ import annotations

import pytest

from support.diskless import DisklessCluster
from support.raw import connect, open_transactions
from support.topics import create_topic
from support.wait import wait_until

# Long enough for the first DescribeProducers to see the producer on a loaded machine.
EXPIRATION = {"KIPPER_PRODUCER_ID_EXPIRATION_MS": "8000",
              "KIPPER_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS": "500"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_endpoint):
    cluster = DisklessCluster(tmp_path_factory.mktemp("expiration"), s3_endpoint,
                              broker_env=EXPIRATION).start()
    yield cluster
    cluster.stop()


def values(bootstrap: str, topic: str) -> list[int]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5_000)
    consumer.assign([TopicPartition(topic, 0)])
    try:
        return [int(record.value) for record in consumer]
    finally:
        consumer.close()


@pytest.mark.parametrize("mode", ["classic", "diskless"])
def test_an_idle_producer_is_forgotten_and_writes_on(cluster, topic_name, mode):
    from confluent_kafka import Producer
    create_topic(cluster.bootstrap, topic_name, 1, 3, {"kipper.storage.mode": mode},
                 in_sync=mode == "classic")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})

    def send(start: int) -> None:
        for i in range(start, start + 10):
            producer.produce(topic_name, str(i).encode(), partition=0)
        assert producer.flush(30) == 0

    send(0)
    leader = cluster.brokers[cluster.leader_of(topic_name)]
    with connect(leader) as sock:
        assert len(open_transactions(sock, topic_name)) == 1
        wait_until(lambda: open_transactions(sock, topic_name) == {}, timeout=40, interval=0.5)
    send(10)  # sequence 10 of a producer the partition no longer knows: accepted
    assert values(cluster.bootstrap, topic_name) == list(range(20))
