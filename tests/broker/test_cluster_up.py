"""`kipper cluster up`: brokers and embedded S3 as processes, used by real clients."""

from __future__ import annotations

import os
import signal

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient

from bench.local_cluster import LocalCluster, pid_alive
from storage.objectstore import WAL_BUCKET, fast_bucket
from support.clients import consume_all
from support.topics import create_topic


@pytest.fixture
def local_cluster(tmp_path):
    clusters: list[LocalCluster] = []

    def start(**options) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"cluster-{len(clusters)}", **options)
        clusters.append(cluster)
        return cluster.start()

    yield start
    for cluster in clusters:
        cluster.stop()


def test_three_brokers_serve_real_clients_and_stop_on_sigterm(local_cluster, topic_name):
    cluster = local_cluster(brokers=3)
    assert len(cluster.bootstrap.split(",")) == 3
    assert set(cluster.nodes) == {"s3", "broker 0", "broker 1", "broker 2"}
    assert cluster.nodes["s3"]["endpoint"].startswith("http://127.0.0.1:")

    # The Metadata API (kafka-python's describe_cluster) lists every broker with its AZ.
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        brokers = admin.describe_cluster()["brokers"]
    finally:
        admin.close()
    assert sorted((b["broker_id"], b["rack"]) for b in brokers) == [
        (0, "az1"), (1, "az2"), (2, "az3")]

    create_topic(cluster.bootstrap, topic_name, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    values = [f"value-{i}".encode() for i in range(100)]
    for value in values:
        producer.produce(topic_name, value)
    assert producer.flush(30) == 0

    received = consume_all(cluster.bootstrap, topic_name, len(values), timeout=30)
    assert received == values

    assert cluster.terminate() == 0
    assert [pid for pid in cluster.pids() if pid_alive(pid)] == []


def test_a_dying_broker_stops_the_cluster_with_an_error(local_cluster):
    cluster = local_cluster(brokers=2)
    os.kill(int(cluster.broker(1)["pid"]), signal.SIGKILL)
    cluster.proc.wait(60)
    assert cluster.proc.returncode == 1
    assert [pid for pid in cluster.pids() if pid_alive(pid)] == []
    assert "broker-1 exited with status -9" in cluster.log_tail()


@pytest.mark.parametrize("storage_mode", ["active-tiered", "diskless"])
def test_racks_that_are_not_bucket_names_work(local_cluster, topic_name, storage_mode):
    """Uppercase racks (any string Kafka takes as broker.rack) start, and the object-store
    modes work across them: active-tiered uploads to each leader's derived fast bucket."""
    racks = ["RACK0", "RACK1", "RACK2"]
    cluster = local_cluster(brokers=3, metrics=True, extra_args=["--racks", ",".join(racks)])
    assert [cluster.broker(node)["rack"] for node in range(3)] == racks

    replicated = storage_mode == "active-tiered"  # a diskless partition names one broker
    create_topic(cluster.bootstrap, topic_name, replication_factor=3 if replicated else 1,
                 config={"kipper.storage.mode": storage_mode}, in_sync=replicated)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    values = [f"value-{i}".encode() for i in range(100)]
    for value in values:
        producer.produce(topic_name, value, partition=0)
    assert producer.flush(30) == 0

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000)
    consumer.assign([KafkaTopicPartition(topic_name, 0)])
    try:
        assert [message.value for message in consumer][:len(values)] == values
    finally:
        consumer.close()

    buckets_written = {row["bucket"] for node in range(3)
                       for row in cluster.metrics_json(node)["objectstore"]["requests"]
                       if row["operation"] == "PutObject"}
    if storage_mode == "active-tiered":
        assert buckets_written & {fast_bucket(rack) for rack in racks}, buckets_written
    else:
        assert buckets_written == {WAL_BUCKET}, buckets_written
