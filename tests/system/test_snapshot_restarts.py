"""Metadata snapshots (KIP-630) in a running cluster: the controller snapshots and deletes the
log below them; restarted, it loads the newest snapshot and the tail; a broker restarted
after a kill -9 loads the snapshot with FetchSnapshot and serves its partitions to real
clients (confluent-kafka, kafka-python); a node restarted again and again, none of its runs
appending enough for a snapshot, still snapshots, and its next start loads it."""

from __future__ import annotations

import pytest

from confluent_kafka.admin import ResourceType

from support.configs import describe
from support.processes import Cluster
from support.topics import create_topic, partition_metadata
from support.wait import wait_until

TOPICS = 15


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path, brokers=3, broker_env={
        "KIPPER_METADATA_LOG_MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS": "4000"})
    yield cluster.start()
    cluster.stop()


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for i in range(start, start + n):
        producer.produce(topic, str(i).encode(), partition=i % 3)
    assert producer.flush(60) == 0


def count(node, text: str) -> int:
    return node.log_path.read_text(errors="replace").count(text)


def test_restarts_load_snapshots_instead_of_the_whole_log(cluster, topic_name):
    names = [f"{topic_name}-{i}" for i in range(TOPICS)]
    for i, name in enumerate(names):
        create_topic(cluster.bootstrap, name, 3, 3, {"retention.ms": str(3_600_000 + i)})
    wait_until(lambda: count(cluster.controller, "wrote metadata snapshot") >= 2, timeout=30)
    assert "the log now starts at 0" not in cluster.controller.log_tail(400).splitlines()[-1]
    produce(cluster.bootstrap, names[0], 0, 300)

    cluster.controller.stop()
    cluster.controller.start()
    assert count(cluster.controller, "loaded metadata snapshot") == 1
    configs = describe(cluster.bootstrap, ResourceType.TOPIC, names[-1])
    assert configs["retention.ms"].value == str(3_600_000 + TOPICS - 1)

    restarted = cluster.brokers[1]
    restarted.kill()
    restarted.start()
    assert count(restarted, "loading metadata snapshot") >= 1
    wait_until(lambda: all(sorted(cluster.isr_of(names[0], p)) == [0, 1, 2] for p in range(3)),
               timeout=60, interval=0.5)
    for broker in (cluster.brokers[0], cluster.brokers[2]):  # broker 1 serves alone
        broker.kill()
    produce(cluster.bootstrap, names[0], 300, 100)
    assert consumed(cluster.bootstrap, names[0]) == set(range(400))


def consumed(bootstrap: str, topic: str) -> set[int]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    try:
        return {int(record.value) for record in consumer}
    finally:
        consumer.close()


# Each start of a lone node appends about 1.4 kB (its registration, the quorum's leader
# change, unfencing): several starts together reach this.
RESTARTS_SNAPSHOT_BYTES = 2500


def test_a_node_restarted_again_and_again_still_snapshots(broker_factory, tmp_path, topic_name):
    config = tmp_path / "snapshots.toml"
    config.write_text(f"metadata_log_max_record_bytes_between_snapshots = "
                      f"{RESTARTS_SNAPSHOT_BYTES}\n")
    node = broker_factory("--config", str(config))  # its own controller, a quorum of one
    create_topic(node.bootstrap, topic_name, 2, 1)
    segments = node.data_dir / "__cluster_metadata-0"
    appended_by_run, size = [], 0
    while count(node, "wrote metadata snapshot") == 0:
        assert len(appended_by_run) < 10, f"no snapshot after runs appending {appended_by_run}"
        node.stop()
        grown = sum(p.stat().st_size for p in segments.glob("*.log"))
        appended_by_run.append(grown - size)
        size = grown
        node.start()
    assert len(appended_by_run) > 1 and max(appended_by_run) < RESTARTS_SNAPSHOT_BYTES

    node.stop()
    loaded = count(node, "loaded metadata snapshot")
    node.start()
    assert count(node, "loaded metadata snapshot") == loaded + 1
    assert partition_metadata(node.bootstrap, topic_name, 1).leader == node.node_id
