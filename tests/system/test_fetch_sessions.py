"""Incremental fetch sessions (KIP-227) on a 3-broker classic cluster: followers replicate in
sessions and an idle follower stays in sync although its fetches list no partition; a
kafka-python consumer (which fetches in sessions) reads every record through them, across a
new subscription and a leader change."""

from __future__ import annotations

import time

import pytest

from support.metrics import scrape, total
from support.processes import Cluster
from support.topics import create_topic
from support.wait import wait_until

PARTITIONS = 12
# Longer than the test cluster's replica.lag.time.max.ms (support.processes.Cluster).
IDLE_S = 6


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path, brokers=3, broker_args=["--metrics-listener", "127.0.0.1:0"])
    yield cluster.start()
    cluster.stop()


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce(topic, str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def fetches(cluster: Cluster, kind: str) -> float:
    return total([scrape(b.metrics_url) for b in cluster.brokers if b.alive()],
                 "kipper_fetch_requests_total", session=kind)


def test_followers_replicate_in_sessions_and_stay_in_sync_while_idle(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, PARTITIONS, 3, in_sync=True)
    produce(cluster.bootstrap, topic_name, 0, 300)
    incremental = fetches(cluster, "incremental")
    assert incremental > 0
    assert fetches(cluster, "full") >= 1
    time.sleep(IDLE_S)  # idle: the followers' fetches list nothing
    scrapes = [scrape(b.metrics_url) for b in cluster.brokers]
    assert total(scrapes, "kipper_isr_shrinks_total") == 0
    assert total(scrapes, "kipper_under_replicated_partitions") == 0
    assert total(scrapes, "kipper_fetch_sessions") >= 2  # one per leader each follower fetches
    assert fetches(cluster, "incremental") > incremental
    assert fetches(cluster, "fetch_session_id_not_found") == 0
    assert fetches(cluster, "invalid_fetch_session_epoch") == 0
    for partition in range(PARTITIONS):
        assert sorted(cluster.isr_of(topic_name, partition)) == [0, 1, 2]


def test_a_kafka_python_consumer_reads_everything_through_its_sessions(cluster, topic_name):
    from kafka import KafkaConsumer, TopicPartition

    other = f"{topic_name}-added"
    for topic in (topic_name, other):
        create_topic(cluster.bootstrap, topic, PARTITIONS, 3, in_sync=True)
    produce(cluster.bootstrap, topic_name, 0, 200)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=20_000,
                             fetch_max_wait_ms=200, metadata_max_age_ms=1000)
    seen: dict[str, set[int]] = {topic_name: set(), other: set()}

    def read_until(count: dict[str, int]) -> None:
        deadline = time.monotonic() + 60
        while any(len(seen[t]) < n for t, n in count.items()) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    seen[record.topic].add(int(record.value))
        assert {t: len(seen[t]) for t in count} == count

    try:
        before = fetches(cluster, "incremental")
        consumer.assign([TopicPartition(topic_name, p) for p in range(PARTITIONS)])
        read_until({topic_name: 200})
        produce(cluster.bootstrap, topic_name, 200, 100)  # news for a session already open
        read_until({topic_name: 300})
        assert fetches(cluster, "incremental") > before
        # Partitions added to the sessions.
        consumer.assign([TopicPartition(t, p) for t in (topic_name, other)
                         for p in range(PARTITIONS)])
        produce(cluster.bootstrap, other, 0, 100)
        read_until({topic_name: 300, other: 100})
        # A leader leaves: its partitions move to sessions with the other brokers.
        leader = cluster.leader_of(topic_name)
        cluster.brokers[leader].kill()
        wait_until(lambda: cluster.leader_of(topic_name) != leader, timeout=30, interval=0.5)
        produce(cluster.bootstrap, topic_name, 300, 100)
        read_until({topic_name: 400, other: 100})
    finally:
        consumer.close()
