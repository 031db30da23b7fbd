"""Issue 4: acks=all RF=3 while the partition leader is kill -9'ed again and again."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer

from support.clients import ConfluentWriter, consume_all
from support.topics import create_topic

pytestmark = pytest.mark.system
KILL_CYCLES = 4  # more cycles, of every node, in tests/system/test_controller_quorum.py and the bench


class KafkaPythonWriter:
    def __init__(self, bootstrap: str) -> None:
        self.acked: list[bytes] = []
        self.failed = 0
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                      enable_idempotence=True, linger_ms=2,
                                      retries=2**31 - 1, delivery_timeout_ms=120_000,
                                      request_timeout_ms=10_000)

    def send(self, topic: str, value: bytes) -> None:
        future = self.producer.send(topic, value, partition=0)
        future.add_callback(lambda _: self.acked.append(value))
        future.add_errback(lambda _: setattr(self, "failed", self.failed + 1))

    def flush(self) -> None:
        self.producer.flush(120)
        self.producer.close(10)


@pytest.mark.parametrize("writer_class", [ConfluentWriter, KafkaPythonWriter])
def test_no_acked_record_lost_across_leader_kills(cluster, topic_name, writer_class):
    create_topic(cluster.bootstrap, topic_name, replication_factor=3,
                 config={"min.insync.replicas": "2"})
    writer = writer_class(cluster.bootstrap)
    sent = 0
    failover_times = []
    for _ in range(KILL_CYCLES):
        for _ in range(200):
            writer.send(topic_name, f"v{sent}".encode())
            sent += 1
        leader = cluster.leader_of(topic_name)
        killed_at = time.monotonic()
        cluster.brokers[leader].kill()
        new_leader = cluster.leader_of(topic_name)
        failover_times.append(time.monotonic() - killed_at)
        assert new_leader != leader
        for _ in range(200):
            writer.send(topic_name, f"v{sent}".encode())
            sent += 1
        cluster.brokers[leader].start()
    writer.flush()
    assert writer.failed == 0
    assert len(writer.acked) == sent
    consumed = consume_all(cluster.bootstrap, topic_name, sent)
    assert sorted(consumed) == sorted(set(consumed)), "a record was consumed twice"
    assert set(writer.acked) <= set(consumed), "an acknowledged record was lost"
    print(f"failover after leader kill: mean {sum(failover_times) / len(failover_times):.2f} s, "
          f"max {max(failover_times):.2f} s")
