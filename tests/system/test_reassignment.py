"""Replica placement by real clients on a 4-broker cluster: manual assignment at creation
(CreateTopics, CreatePartitions), KIP-455 reassignment (kafka-python's
alter/list_partition_reassignments) under an idempotent acks=all producer and a consumer
that keeps reading, in every storage mode, and with the replication throttle set as Kafka's
reassignment tool sets it; ElectLeaders (KIP-460, confluent-kafka);
kafkajs's admin client (tests/js/admin.mjs) and kcat's metadata see the same placements."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ResourceType
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import (InvalidReplicationAssignmentError, InvalidRequestError,
                          NoReassignmentInProgressError, UnknownTopicOrPartitionError)

from support.clients import AckedProducer, assert_acked_exactly_once
from support.configs import alter
from support.processes import Cluster
from support.kcat import kcat
from support.topics import partition_metadata
from support.wait import wait_until

MODES = ("classic", "active-tiered", "diskless")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_endpoint):
    cluster = Cluster(tmp_path_factory.mktemp("reassignment"), brokers=4, s3=s3_endpoint).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def admin(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    yield admin
    admin.close()


class KeepReading(threading.Thread):
    """A consumer of partition 0 that polls until stopped, counting what it read."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{topic}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.consumer.assign([ConfluentPartition(topic, 0, 0)])
        self.read = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            message = self.consumer.poll(0.2)
            if message is not None and not message.error():
                self.read += 1

    def finish(self) -> None:
        self.stopping.set()
        self.join(10)
        self.consumer.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_partition_moves_to_other_brokers_under_load(cluster, admin, topic_name, mode):
    admin.create_topics([NewTopic(topic_name, replica_assignments={0: [0, 1, 2]},
                                  topic_configs={"kipper.storage.mode": mode,
                                                 "min.insync.replicas": "2"})])
    wait_until(lambda: (info := partition_metadata(cluster.bootstrap, topic_name)) is not None
               and info.leader >= 0, 30, interval=0.2)
    # A diskless partition is served by every broker, and Metadata says so whatever its
    # (nominal) replicas: its reassignment only changes the controller's record.
    replicas_shown = mode != "diskless"
    if replicas_shown:
        assert list(partition_metadata(cluster.bootstrap, topic_name).replicas) == [0, 1, 2]
    writer = AckedProducer(cluster.bootstrap, topic_name, "az1")
    reader = KeepReading(cluster.bootstrap, topic_name)
    writer.start()
    reader.start()
    try:
        wait_until(lambda: len(writer.acked) > 300 and reader.read > 100, 30)
        partition = TopicPartition(topic_name, 0)
        started = time.monotonic()
        result = admin.alter_partition_reassignments({partition: [1, 2, 3]})
        assert result[partition] is None, result
        wait_until(lambda: not admin.list_partition_reassignments([partition]), 60, interval=0.2)
        print(f"{mode}: reassigned with {len(writer.acked)} records acknowledged in "
              f"{time.monotonic() - started:.1f} s")
        if replicas_shown:
            info = partition_metadata(cluster.bootstrap, topic_name)
            assert list(info.replicas) == [1, 2, 3]
            assert info.leader in (1, 2, 3)
        # Both sides go on after the move.
        acked, read = len(writer.acked), reader.read
        wait_until(lambda: len(writer.acked) > acked + 300 and reader.read > read + 300, 30)
    finally:
        writer.finish()
        reader.finish()
    assert not writer.errors, writer.errors[:3]
    assert_acked_exactly_once(cluster.bootstrap, topic_name, writer)
    if replicas_shown:  # (a diskless partition has no replica of its own on a broker)
        removed = cluster.brokers[0].data_dir / f"{topic_name}-0"
        wait_until(lambda: not removed.exists(), 15)
        assert (cluster.brokers[3].data_dir / f"{topic_name}-0").exists()


def test_manual_assignment_of_new_partitions(cluster, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, replica_assignments={0: [3, 1], 1: [2, 0]})])
    admin.create_partitions({topic_name: {"count": 3, "assignments": [[1, 3]]}})
    replicas = wait_until(lambda: [list(p.replicas) for p in (
        partition_metadata(cluster.bootstrap, topic_name, i) for i in range(3)) if p] or None,
        30, interval=0.2)
    assert replicas == [[3, 1], [2, 0], [1, 3]]


def test_bad_placements_get_kafkas_errors(cluster, admin, topic_name):
    with pytest.raises(InvalidReplicationAssignmentError):
        admin.create_topics([NewTopic(topic_name, replica_assignments={0: [0, 9]})])
    with pytest.raises(InvalidReplicationAssignmentError):
        admin.create_topics([NewTopic(topic_name, replica_assignments={0: [0, 1], 2: [1, 2]})])
    with pytest.raises(InvalidRequestError):
        admin.create_topics([NewTopic(topic_name, num_partitions=1,
                                      replica_assignments={0: [0, 1]})])
    admin.create_topics([NewTopic(topic_name, replica_assignments={0: [0, 1]})])
    with pytest.raises(InvalidReplicationAssignmentError):
        admin.create_partitions({topic_name: {"count": 2, "assignments": [[2]]}})
    partition = TopicPartition(topic_name, 0)
    unknown = TopicPartition(topic_name, 7)
    results = admin.alter_partition_reassignments(
        {partition: [1, 1], unknown: [1, 2]})
    # (kafka-python gives each partition's error class)
    assert results[partition] is InvalidReplicationAssignmentError, results
    assert results[unknown] is UnknownTopicOrPartitionError, results
    results = admin.alter_partition_reassignments({partition: None})
    assert results[partition] is NoReassignmentInProgressError, results
    assert list(partition_metadata(cluster.bootstrap, topic_name).replicas) == [0, 1]


def test_elect_leaders_on_demand(cluster, admin, topic_name):
    """(Preferred-leader rebalancing is off on this cluster: only ElectLeaders moves it.)"""
    admin.create_topics([NewTopic(topic_name, replica_assignments={0: [0, 1, 2]})])
    wait_until(lambda: len(partition_metadata(cluster.bootstrap, topic_name).isrs) == 3, 30,
               interval=0.2)
    # Reordering the replicas (a reassignment within the ISR) leaves the leader in place.
    partition = TopicPartition(topic_name, 0)
    assert admin.alter_partition_reassignments({partition: [1, 0, 2]})[partition] is None
    info = wait_until(lambda: (p := partition_metadata(cluster.bootstrap, topic_name))
                      and list(p.replicas) == [1, 0, 2] and p, 30, interval=0.2)
    assert info.leader == 0

    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    asked = [ConfluentPartition(topic_name, 0), ConfluentPartition(topic_name, 5)]
    results = confluent.elect_leaders(ElectionType.PREFERRED, asked).result(30)
    assert results[asked[0]] is None
    assert results[asked[1]].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert partition_metadata(cluster.bootstrap, topic_name).leader == 1
    results = confluent.elect_leaders(ElectionType.PREFERRED, asked[:1]).result(30)
    assert results[asked[0]].code() == KafkaError.ELECTION_NOT_NEEDED
    results = confluent.elect_leaders(ElectionType.UNCLEAN, asked[:1]).result(30)
    assert results[asked[0]].code() == KafkaError.ELECTION_NOT_NEEDED


THROTTLED_RATE = 100_000  # bytes per second, for leaders and followers
THROTTLED_BYTES = 3 << 19  # 1.5 MiB: more than a replica fetch takes at once (1 MiB)


def set_throttle(cluster: Cluster, topic: str, rate: int | None) -> None:
    """Kafka's reassignment tool's throttle: both rates on every broker, every replica of
    ``topic`` throttled (``*``); None removes them."""
    op = AlterConfigOpType.DELETE if rate is None else AlterConfigOpType.SET
    for broker in cluster.brokers:
        value = None if rate is None else str(rate)
        alter(cluster.bootstrap, ResourceType.BROKER, str(broker.node_id),
              leader_replication_throttled_rate=(op, value),
              follower_replication_throttled_rate=(op, value))
    replicas = None if rate is None else "*"
    alter(cluster.bootstrap, ResourceType.TOPIC, topic,
          leader_replication_throttled_replicas=(op, replicas),
          follower_replication_throttled_replicas=(op, replicas))


def test_the_replication_throttle_slows_a_reassignment(cluster, admin, topic_name):
    """A replica fetch takes up to 1 MiB, and the rate is measured over Kafka's 11 windows
    of a second (at least 10 s): the first fetch goes at once, the rest waits until the
    measured rate is under the quota again."""
    admin.create_topics([NewTopic(topic_name, replica_assignments={0: [0, 1, 2]})])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for _ in range(THROTTLED_BYTES // 1024):
        producer.produce(topic_name, os.urandom(1024), partition=0)
    assert producer.flush(30) == 0
    stored = sum(p.stat().st_size
                 for p in (cluster.brokers[0].data_dir / f"{topic_name}-0").glob("*.log"))
    partition = TopicPartition(topic_name, 0)

    def reassign(replicas: list[int]) -> float:
        started = time.monotonic()
        assert admin.alter_partition_reassignments({partition: replicas})[partition] is None
        wait_until(lambda: not admin.list_partition_reassignments([partition]), 60,
                   interval=0.1)
        return time.monotonic() - started

    set_throttle(cluster, topic_name, THROTTLED_RATE)
    try:
        throttled = reassign([1, 2, 3])
    finally:
        set_throttle(cluster, topic_name, None)
    unthrottled = reassign([0, 1, 2])
    print(f"{stored} bytes reassigned in {throttled:.1f} s at {THROTTLED_RATE} B/s, "
          f"in {unthrottled:.1f} s unthrottled")
    assert throttled >= 0.5 * stored / THROTTLED_RATE
    assert unthrottled < throttled / 2
    assert list(partition_metadata(cluster.bootstrap, topic_name).replicas) == [0, 1, 2]


def test_kafkajs_admin_places_configures_and_moves_replicas(cluster, kafkajs, topic_name):
    """kafkajs: CreateTopics and CreatePartitions with assignments, AlterConfigs,
    DescribeConfigs with synonyms, Alter/ListPartitionReassignments, DescribeCluster; then
    kcat's metadata shows the moved partition's replicas and ISR."""
    proc = subprocess.run(
        [shutil.which("node"), str(kafkajs / "admin.mjs"), "--bootstrap", cluster.bootstrap,
         "--topic", topic_name], capture_output=True, stdin=subprocess.DEVNULL, timeout=90)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    result = json.loads(proc.stdout)

    assert result["created"] is True
    assert [(p["partition"], p["replicas"]) for p in result["created_placement"]] == [
        (0, [3, 1]), (1, [2, 0]), (2, [1, 3])]
    topic_configs, broker_configs = result["configs"]
    assert (topic_configs["resourceType"], topic_configs["errorCode"]) == (2, 0)
    entries = {e["configName"]: e for e in topic_configs["configEntries"]}
    assert set(entries) == {"retention.ms", "cleanup.policy"}
    retention = entries["retention.ms"]
    # configSource 1: DYNAMIC_TOPIC_CONFIG; its synonyms go on to the broker's default (5).
    assert (retention["configValue"], retention["configSource"], retention["isDefault"]) == (
        "3600000", 1, False)
    assert [(s["configName"], s["configSource"]) for s in retention["configSynonyms"]][:2] == [
        ("retention.ms", 1), ("log.retention.hours", 5)]
    assert entries["cleanup.policy"]["configValue"] == "delete"
    assert (broker_configs["resourceType"], broker_configs["errorCode"]) == (4, 0)
    entries = {e["configName"]: e for e in broker_configs["configEntries"]}
    assert entries["broker.id"]["configValue"] == "0" and entries["broker.id"]["readOnly"]
    assert entries["log.retention.hours"]["configValue"] == "168"

    # Listed while in progress (if the first listing came soon enough): partition 0 only,
    # the target replicas first, then those being removed (as Kafka orders them).
    in_progress = [{"name": topic_name, "partitions": [{
        "partition": 0, "replicas": [0, 2, 3, 1], "addingReplicas": [0, 2],
        "removingReplicas": [3, 1]}]}]
    assert result["listed"][:-1] == [in_progress] * (len(result["listed"]) - 1)
    assert result["listed"][-1] == []
    [moved, *_] = result["reassigned_placement"]
    assert (moved["replicas"], sorted(moved["isr"])) == ([0, 2], [0, 2])
    assert sorted(b["nodeId"] for b in result["cluster"]["brokers"]) == [0, 1, 2, 3]
    assert result["cluster"]["controller"] in (0, 1, 2, 3)

    metadata = json.loads(kcat("-b", cluster.bootstrap, "-X", "broker.address.family=v4",
                               "-L", "-J", "-t", topic_name))
    [listed] = metadata["topics"]
    placed = {p["partition"]: ([r["id"] for r in p["replicas"]], sorted(r["id"] for r in p["isrs"]))
              for p in listed["partitions"]}
    assert placed == {0: ([0, 2], [0, 2]), 1: ([2, 0], [0, 2]), 2: ([1, 3], [1, 3])}
