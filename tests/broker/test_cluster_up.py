"""`kipper cluster up`: brokers and embedded S3 as processes, used by real clients."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient

from bench.lifecycle_bench import (
    create_topics,
    mixed_topics,
    produce,
    read_everything,
    timed_start,
    timed_stop,
)
from bench.local_cluster import LocalCluster, pid_alive
from storage.objectstore import WAL_BUCKET, fast_bucket
from support.clients import consume_all
from support.metrics import scrape, total
from support.storage_modes import MODES
from support.topics import create_topic
from support.wait import wait_until


@pytest.fixture
def local_cluster(tmp_path):
    clusters: list[LocalCluster] = []

    def start(root=None, **options) -> LocalCluster:
        """A new cluster, or with `root` one more start of a cluster's data dir."""
        cluster = LocalCluster(root or tmp_path / f"cluster-{len(clusters)}", **options)
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


def test_a_dying_broker_is_reported_and_started_again_on_request(local_cluster, topic_name):
    """kill -9 of a broker: the launcher says which and how, the others keep serving, and
    `kipper cluster start-broker N` brings it back on its address."""
    cluster = local_cluster(brokers=3)
    address = cluster.broker(1)["address"]
    os.kill(int(cluster.broker(1)["pid"]), signal.SIGKILL)
    wait_until(lambda: "broker-1 died (killed by SIGKILL)" in cluster.log_tail(), 30)
    assert cluster.proc.poll() is None
    assert "kipper cluster start-broker 1" in cluster.log_tail()
    create_topic(cluster.bootstrap, topic_name, replication_factor=2)

    started = subprocess.run(
        [sys.executable, "-m", "broker.cli", "cluster", "start-broker", "1",
         "--data-dir", str(cluster.root / "data")], capture_output=True, text=True, timeout=90)
    assert started.returncode == 0, started.stderr
    assert f"address={address}" in started.stdout
    again = subprocess.run(
        [sys.executable, "-m", "broker.cli", "cluster", "start-broker", "1",
         "--data-dir", str(cluster.root / "data")], capture_output=True, text=True, timeout=90)
    assert again.returncode == 1 and "broker 1 is running" in again.stderr
    cluster.nodes["broker 1"]["pid"] = started.stdout.split("pid=")[1].split()[0]
    assert cluster.terminate() == 0
    assert [pid for pid in cluster.pids() if pid_alive(pid)] == []


def _kafka_python_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=15_000)
    try:
        partition = KafkaTopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == expected:
                break
        return values
    finally:
        consumer.close()


def test_every_mode_keeps_its_records_across_stop_start_and_kill_9_of_the_tree(
        local_cluster, topic_name):
    """Acknowledged records of every storage mode are there again after Ctrl-C and start, and
    after kill -9 of the launcher, every broker and the S3 server at once (same data dir)."""
    cluster = local_cluster(brokers=3)
    topics = {mode: f"{topic_name}-{mode}" for mode in MODES}
    for mode, topic in topics.items():
        create_topic(cluster.bootstrap, topic, replication_factor=3,
                     config={"kipper.storage.mode": mode})
    confluent = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                          "enable.idempotence": True})
    kafka_python = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    expected: dict[str, list[bytes]] = {}
    for mode, topic in topics.items():
        expected[mode] = [f"{mode}-confluent-{i}".encode() for i in range(100)]
        for value in expected[mode]:
            confluent.produce(topic, value)
        assert confluent.flush(30) == 0
        python_values = [f"{mode}-kafka-python-{i}".encode() for i in range(100)]
        for value in python_values:
            kafka_python.send(topic, value)
        kafka_python.flush(30)
        expected[mode] += python_values
    kafka_python.close()

    # Ctrl-C, then the same command again.
    os.kill(cluster.proc.pid, signal.SIGINT)
    assert cluster.proc.wait(60) == 0
    cluster = local_cluster(brokers=3, root=cluster.root)
    for mode, topic in topics.items():
        assert consume_all(cluster.bootstrap, topic, len(expected[mode])) == expected[mode], mode

    # kill -9 of the whole tree: no process gets to flush or close anything.
    for pid in [cluster.proc.pid, *cluster.pids()]:
        os.kill(pid, signal.SIGKILL)
    cluster.proc.wait(10)
    cluster = local_cluster(brokers=3, root=cluster.root)
    for mode, topic in topics.items():
        assert _kafka_python_values(cluster.bootstrap, topic, len(expected[mode])) == expected[mode], mode


def test_a_taken_port_is_named_in_one_line_with_the_flag_to_change_it(local_cluster):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError) as failed:
            local_cluster(brokers=1, extra_args=["--base-port", str(port)])
    log = str(failed.value)
    assert f"cannot listen on 127.0.0.1:{port}: address already in use; choose a free port with --listener" in log
    assert "broker-0 exited while starting" in log
    assert "Traceback" not in log


def test_kill_9_of_the_launcher_stops_every_node(local_cluster):
    cluster = local_cluster(brokers=2)
    os.kill(cluster.proc.pid, signal.SIGKILL)
    cluster.proc.wait(10)
    deadline = time.monotonic() + 30
    while [pid for pid in cluster.pids() if pid_alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in cluster.pids() if pid_alive(pid)] == []


def test_racks_that_are_not_bucket_names_work(local_cluster, topic_name):
    """Uppercase racks (any string Kafka takes as broker.rack) start, and the object-store
    modes work across them: active-tiered uploads to each leader's derived fast bucket,
    diskless to the WAL bucket."""
    racks = ["RACK0", "RACK1", "RACK2"]
    cluster = local_cluster(brokers=3, metrics=True, extra_args=["--racks", ",".join(racks)])
    assert [cluster.broker(node)["rack"] for node in range(3)] == racks

    def puts() -> set[str]:
        return {row["bucket"] for node in range(3)
                for row in cluster.metrics_json(node)["objectstore"]["requests"]
                if row["operation"] == "PutObject"}

    values = [f"value-{i}".encode() for i in range(100)]
    buckets_written = {}
    for mode in ("active-tiered", "diskless"):
        topic, before = f"{topic_name}-{mode}", puts()
        replicated = mode == "active-tiered"  # a diskless partition names one broker
        create_topic(cluster.bootstrap, topic, replication_factor=3 if replicated else 1,
                     config={"kipper.storage.mode": mode}, in_sync=replicated)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for value in values:
            producer.produce(topic, value, partition=0)
        assert producer.flush(30) == 0
        assert consume_all(cluster.bootstrap, topic, len(values)) == values, mode
        buckets_written[mode] = puts() - before

    assert buckets_written["active-tiered"] & {fast_bucket(rack) for rack in racks}, buckets_written
    assert WAL_BUCKET in buckets_written["diskless"], buckets_written


@pytest.mark.system
def test_creating_and_deleting_5000_partitions_fences_nothing_and_keeps_the_controller(
        local_cluster, topic_name):
    """Thousands of partitions created and deleted are applied in turns of the event loop:
    every broker keeps heartbeating (none fenced), every follower keeps fetching (no ISR
    shrinks), and every voter keeps hearing from the quorum's leader (no election)."""
    from confluent_kafka.admin import AdminClient
    cluster = local_cluster(brokers=3, metrics=True)
    position = cluster.log_size()
    create_topic(cluster.bootstrap, topic_name, 5000, 3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic_name], operation_timeout=60)[topic_name].result(90)
    wait_until(lambda: topic_name not in admin.list_topics(timeout=10).topics, timeout=60)
    time.sleep(3)  # what the deletion set off: log deletions, fetchers stopping
    log = cluster.log_since(position)
    assert "fencing broker" not in log and "asking the voters for an election" not in log, \
        "\n".join(line for line in log.splitlines() if "fencing" in line or "election" in line)
    scrapes = [scrape(cluster.broker(node)["metrics"]) for node in range(3)]
    assert total(scrapes, "kipper_isr_shrinks_total") == 0


def test_2000_partitions_stop_gracefully_and_restart_usable_at_the_bootstrap_line(local_cluster):
    """Ctrl-C of a cluster with 2,000 partitions of every mode, after traffic, stops every
    broker gracefully, none killed (how long it takes is bench/lifecycle_bench.py's figure); started again, every partition answers ListOffsets as soon
    as the bootstrap line is printed, no broker was fenced while loading, and every
    acknowledged record is there."""
    topics = mixed_topics({"classic": 1700, "active-tiered": 150, "diskless": 150})
    assert sum(topic.partitions for topic in topics) == 2000
    cluster = local_cluster(brokers=3)
    create_topics(cluster.bootstrap, topics)
    acked = produce(cluster.bootstrap, topics, partitions_per_topic=5, records_per_partition=20)

    stop = timed_stop(cluster)
    assert (stop.status, stop.killed) == (0, False), (stop, cluster.log_tail())

    cluster = LocalCluster(cluster.root, brokers=3)
    try:
        start = timed_start(cluster, topics)
        assert start.failing_at_bootstrap == {}, start
        assert start.fenced == [], start.fenced
        assert read_everything(cluster.bootstrap, acked) == {}
    finally:
        cluster.stop()
