"""The describe side of the admin API as real clients see it: DescribeLogDirs in every
storage mode (kafka-python: this broker's data dir, each partition's size, no lag once
caught up; diskless partitions with their bytes in object storage), the authorized
operations of topics, the cluster and groups (confluent-kafka; every operation Kafka checks,
as no ACLs exist), and ListGroups' type filter (confluent-kafka's list_consumer_groups)."""

from __future__ import annotations

from confluent_kafka import (
    ConsumerGroupType,
    Consumer,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AclOperation, AdminClient
from kafka.admin import KafkaAdminClient

from support.topics import create_topic
from support.wait import wait_until

RECORDS = 50


def _log_dirs(bootstrap: str, topics) -> list[dict]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return admin.describe_log_dirs(topics)
    finally:
        admin.close()


def _sizes(answers: list[dict], topic: str) -> dict[int, tuple[int, int]]:
    """(size, offset lag) of partition 0 of ``topic`` by the broker hosting it."""
    out = {}
    for answer in answers:
        [log_dir] = answer["log_dirs"]
        assert log_dir["error_code"] == 0
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        for entry in log_dir["topics"]:
            assert entry["name"] == topic, "a topic outside the filter was described"
            for partition in entry["partitions"]:
                assert not partition["is_future_key"]
                out[answer["broker"]] = (partition["partition_size"], partition["offset_lag"])
    return out


def test_describe_log_dirs_reports_each_hosted_partition(storage_mode, topic_name):
    create_topic(storage_mode.bootstrap, topic_name,
                 replication_factor=storage_mode.replication_factor)
    producer = Producer({"bootstrap.servers": storage_mode.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic_name, f"value-{i}".encode() * 10, partition=0)
    assert producer.flush(30) == 0

    def caught_up() -> bool:
        sizes = _sizes(_log_dirs(storage_mode.bootstrap, {topic_name: [0]}), topic_name)
        return (len(sizes) >= storage_mode.replication_factor
                and all(size >= RECORDS * 70 and lag == 0 for size, lag in sizes.values()))
    wait_until(caught_up, timeout=30, interval=0.5)
    # A null topic list describes every partition, this one among them.
    everything = _log_dirs(storage_mode.bootstrap, None)
    assert any(entry["name"] == topic_name for answer in everything
               for entry in answer["log_dirs"][0]["topics"])


def test_authorized_operations_are_every_operation_kafka_checks(shared_broker, topic_name):
    bootstrap = f"127.0.0.1:{shared_broker.port}"
    create_topic(bootstrap, topic_name)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = TopicCollection([topic_name])

    [described] = admin.describe_topics(topics, include_authorized_operations=True).values()
    assert set(described.result(30).authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS}
    [plain] = admin.describe_topics(topics).values()
    assert plain.result(30).authorized_operations is None

    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE}
    assert admin.describe_cluster().result(30).authorized_operations is None

    group = _group_with_offsets(bootstrap, topic_name)
    [described_group] = admin.describe_consumer_groups(
        [group], include_authorized_operations=True).values()
    # Kafka 3.8+ (KIP-848's group configs): a group's configs are ACL'd too.
    assert set(described_group.result(30).authorized_operations) == {
        AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}


def test_list_groups_filters_by_type(shared_broker, topic_name):
    bootstrap = f"127.0.0.1:{shared_broker.port}"
    create_topic(bootstrap, topic_name)
    group = _group_with_offsets(bootstrap, topic_name)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def listed(types: set[ConsumerGroupType]) -> dict[str, ConsumerGroupType]:
        result = admin.list_consumer_groups(types=types).result(30)
        return {g.group_id: g.type for g in result.valid}

    assert listed({ConsumerGroupType.CLASSIC})[group] == ConsumerGroupType.CLASSIC
    assert listed(set())[group] == ConsumerGroupType.CLASSIC
    assert group not in listed({ConsumerGroupType.CONSUMER})


def _group_with_offsets(bootstrap: str, topic: str) -> str:
    """A group (Empty, classic) that committed an offset of ``topic``."""
    group = f"group-{topic}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    return group
