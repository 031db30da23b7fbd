"""Issue 4: min.insync.replicas, follower catch-up and ISR rejoin, truncation by leader epoch."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from support.clients import consume_all
from support.processes import Cluster
from support.topics import create_topic
from support.wait import wait_until

pytestmark = pytest.mark.system


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all",
            timeout_ms: int = 20_000) -> list[KafkaError | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2,
                         "message.timeout.ms": timeout_ms, "retries": 0})
    outcomes: list[KafkaError | None] = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda e, m: outcomes.append(e))
    producer.flush(timeout_ms / 1000 + 10)
    return outcomes


def test_min_insync_replicas_refuses_then_resumes(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, replication_factor=3,
                 config={"min.insync.replicas": "2"})
    assert produce(cluster.bootstrap, topic_name, [b"before"]) == [None]
    leader = cluster.leader_of(topic_name)
    followers = [b for b in cluster.brokers if b.node_id != leader]
    for follower in followers:
        follower.kill()
    wait_until(lambda: cluster.isr_of(topic_name) == [leader], timeout=30, interval=0.2)
    errors = produce(cluster.bootstrap, topic_name, [b"refused"], timeout_ms=5000)
    assert errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS
    followers[0].start()
    wait_until(lambda: len(cluster.isr_of(topic_name)) >= 2, timeout=30, interval=0.2)
    assert produce(cluster.bootstrap, topic_name, [b"after"]) == [None]
    assert consume_all(cluster.bootstrap, topic_name, 2) == [b"before", b"after"]


def test_lagging_follower_catches_up_and_rejoins_isr(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, replication_factor=3)
    leader = cluster.leader_of(topic_name)
    follower = next(b for b in cluster.brokers if b.node_id != leader)
    follower.kill()
    wait_until(lambda: follower.node_id not in cluster.isr_of(topic_name), timeout=30,
               interval=0.2)
    values = [f"r{i}".encode() for i in range(2000)]
    assert set(produce(cluster.bootstrap, topic_name, values)) == {None}
    follower.start()
    wait_until(lambda: follower.node_id in cluster.isr_of(topic_name), timeout=30,
               interval=0.2)
    # The rejoined follower holds everything: make it the only survivor with the data.
    for broker in cluster.brokers:
        if broker.node_id != follower.node_id:
            broker.kill()
    wait_until(lambda: cluster.leader_of(topic_name) == follower.node_id, timeout=30)
    assert consume_all(cluster.bootstrap, topic_name, len(values)) == values


def test_unclean_leader_change_truncates_the_old_leader(tmp_path, topic_name):
    """An out-of-sync replica is elected (unclean); the old leader's extra records, which
    were never committed, are truncated away when it returns as a follower."""
    cluster = Cluster(tmp_path, brokers=2).start()
    try:
        create_topic(cluster.bootstrap, topic_name, replication_factor=2,
                     config={"unclean.leader.election.enable": "true"})
        assert produce(cluster.bootstrap, topic_name, [b"committed"]) == [None]
        leader = cluster.leader_of(topic_name)
        old_leader, other = cluster.brokers[leader], cluster.brokers[1 - leader]
        other.kill()
        wait_until(lambda: cluster.isr_of(topic_name) == [leader], timeout=30, interval=0.2)
        # acks=1 on the lone leader: these exist only in the old leader's log.
        assert produce(cluster.bootstrap, topic_name, [b"lost-1", b"lost-2"], acks="1") == [None, None]
        old_leader.kill()
        other.start()
        wait_until(lambda: cluster.leader_of(topic_name) == other.node_id, timeout=30)
        assert produce(cluster.bootstrap, topic_name, [b"new-epoch"], acks="1") == [None]
        old_leader.start()
        wait_until(lambda: set(cluster.isr_of(topic_name)) == {0, 1}, timeout=30, interval=0.2)
        other.kill()
        wait_until(lambda: cluster.leader_of(topic_name) == old_leader.node_id, timeout=30)
        assert consume_all(cluster.bootstrap, topic_name, 2) == [b"committed", b"new-epoch"]
    finally:
        cluster.stop()
