"""Shared storage (KIP-1183) failover with real clients on `kipper cluster up`: kill -9 of
partition leaders under an idempotent acks=all producer loses and duplicates nothing (the
new leaders reopen the partitions from object storage, producer state included); a leader
paused past its session (a zombie) and resumed never gets a write acknowledged that the new
leader does not hold; a transaction open across a failover commits. The figures of 20
cycles and of 1,000 partitions reopened at once come from bench/shared_bench.py."""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.controller_failover_bench import Producing, read_back, start_broker, wait_for
from bench.local_cluster import LocalCluster
from bench.shared_bench import BROKERS, CLUSTER_ENV, create_shared_topic, leaders, run_failover

# In-suite leader kills (the bench runs 20).
CYCLES = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = LocalCluster(tmp_path_factory.mktemp("shared-failover") / "cluster",
                           brokers=BROKERS, env=CLUSTER_ENV).start()
    yield started
    started.stop()


@pytest.mark.system
def test_killing_leaders_loses_and_duplicates_nothing(cluster):
    result = run_failover(cluster, CYCLES, topic="shared-kill-9")
    assert result.acked > 0, result
    assert (result.lost, result.duplicated) == (0, 0), result
    # Every kill moved partitions, and their new leaders reopened them from object storage.
    assert sum(r.partitions for r in result.reopens) >= CYCLES, result.reopens


@pytest.mark.system
def test_a_paused_leader_gets_no_write_acknowledged_after_it_is_fenced(cluster):
    topic = "shared-zombie"
    create_shared_topic(cluster, topic, 6)
    wait_for(lambda: len(leaders(cluster, topic)) == 6, 30, "topic ready")
    producing = Producing(cluster.bootstrap, topic).start()
    try:
        time.sleep(1.0)
        node = leaders(cluster, topic)[0]
        pid = int(cluster.broker(node)["pid"])
        paused_at = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            # Fenced (3 s session), its partitions reopened elsewhere, writes go on there:
            # once librdkafka gives up on its requests to the paused broker (request.timeout.ms,
            # 30 s), twice when it then asks that broker for its new producer id.
            wait_for(lambda: leaders(cluster, topic)[0] != node
                     and producing.all_acked_since(paused_at + 4.0), 120, "writes resumed")
        finally:
            os.kill(pid, signal.SIGCONT)
        # The zombie wakes up with produce requests and a WAL buffer of the old epoch: its
        # commits are refused, and it learns it no longer leads.
        time.sleep(3.0)
    finally:
        producing.stop()
    seen = read_back(cluster.bootstrap, topic)
    assert producing.acked
    assert [value for value in producing.acked if seen[value] != 1] == []
    assert [value for value, count in seen.items() if count > 1] == []


@pytest.mark.system
def test_a_transaction_open_across_a_failover_commits(cluster):
    """The new leader rebuilds the open transaction from the records it reopens: the
    coordinator's markers land on it, and read_committed consumers see the records."""
    topic = "shared-txn"
    create_shared_topic(cluster, topic, 1)
    wait_for(lambda: len(leaders(cluster, topic)) == 1, 30, "topic ready")
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": "shared-txn-failover",
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    node = leaders(cluster, topic)[0]
    cluster.kill_broker(node)
    try:
        wait_for(lambda: leaders(cluster, topic)[0] not in (node, -1), 60, "new leader")
        for i in range(10, 20):
            producer.produce(topic, f"v{i}".encode(), partition=0)
        producer.commit_transaction(60)
    finally:
        start_broker(cluster, node)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "shared-txn-check",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + 60
    while len(values) < 20 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            values.append(message.value().decode())
    consumer.close()
    assert values == [f"v{i}" for i in range(20)]
