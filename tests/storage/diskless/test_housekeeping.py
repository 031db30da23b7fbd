"""The batch coordinator's housekeeping with real clients: object merging (KIP-1165) while
consumers read, DeleteRecords, time retention on the broker's retention schedule, and
deletion of emptied WAL objects."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from support.clients import consume_all
from support.diskless import FAST_HOUSEKEEPING, DisklessCluster
from support.topics import create_topic
from support.wait import wait_until

ROUNDS = 12
PER_ROUND = 50
# log.retention.check.interval.ms of this module's cluster: housekeeping runs every 0.5 s,
# retention only this often.
RETENTION_CHECK_S = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_endpoint):
    cluster = DisklessCluster(tmp_path_factory.mktemp("housekeeping"), s3_endpoint, broker_env={
        **FAST_HOUSEKEEPING, "KIPPER_DISKLESS_MERGE_MIN_OBJECTS": "4",
        "KIPPER_LOG_RETENTION_CHECK_INTERVAL_MS": str(RETENTION_CHECK_S * 1000)}).start()
    yield cluster
    cluster.stop()


def produce_in_rounds(bootstrap: str, topic: str) -> list[bytes]:
    """ROUNDS separate flushes, so each round lands in WAL objects of its own."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "writer az=az1",
                         "linger.ms": 1})
    values = []
    for round_ in range(ROUNDS):
        for i in range(PER_ROUND):
            values.append(f"r{round_}-{i}".encode())
            producer.produce(topic, values[-1], partition=0)
        assert producer.flush(30) == 0
    return values


def offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30).offset
    latest = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(30).offset
    return earliest, latest


def test_small_objects_are_merged_and_reads_stay_correct(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name)
    values = produce_in_rounds(cluster.bootstrap, topic_name)
    objects_before = cluster.committed_keys()
    merged = wait_until(lambda: {k for k in cluster.committed_keys() if "/wal/merged-" in k},
                        60, 0.5)
    # Read while the coordinates move and the old objects go.
    for _ in range(3):
        assert consume_all(cluster.bootstrap, topic_name, len(values),
                           config={"client.id": "reader az=az2"}) == values
    # The merged-away objects are deleted; what is left in S3 is what the coordinator knows.
    wait_until(lambda: not (objects_before - cluster.committed_keys()) & cluster.wal_keys(),
               60, 0.5)
    assert merged & cluster.wal_keys() and cluster.wal_keys() <= cluster.committed_keys()
    assert consume_all(cluster.bootstrap, topic_name, len(values),
                       config={"client.id": "reader az=az3"}) == values


def test_delete_records_moves_the_log_start(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name)
    values = produce_in_rounds(cluster.bootstrap, topic_name)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    [deleted] = admin.delete_records([TopicPartition(topic_name, 0, 100)]).values()
    assert deleted.result(30).low_watermark == 100
    wait_until(lambda: offsets(cluster.bootstrap, topic_name) == (100, len(values)), 30, 0.2)
    assert consume_all(cluster.bootstrap, topic_name, len(values) - 100) == values[100:]


def test_time_retention_empties_the_log_and_its_objects_are_deleted(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, config={"retention.ms": "2000"})
    values = produce_in_rounds(cluster.bootstrap, topic_name)
    topic_id = cluster.topic_id(topic_name)
    # The objects holding this topic's batches alone: merging may already have put some of
    # them beside another test's live batches, and such an object rightly stays.
    keys = {key for (key,) in cluster.coordinator_rows(
        "SELECT object_key FROM batches GROUP BY object_key "
        "HAVING MIN(topic_id) = ? AND MAX(topic_id) = ?", (topic_id, topic_id))}
    assert keys
    wait_until(lambda: offsets(cluster.bootstrap, topic_name) == (len(values), len(values)), 60, 0.5)
    wait_until(lambda: not keys & cluster.wal_keys(), 60, 0.5)


def retention_runs(cluster) -> int:
    return sum(broker.metrics_json()["diskless"]["housekeeping"]["retention_runs"]
               for broker in cluster.brokers)


def test_retention_runs_on_the_retention_check_interval(cluster, topic_name):
    """Records whose CreateTime is past retention.ms stay until the next retention check
    (log.retention.check.interval.ms), as in a classic topic, while housekeeping runs every
    0.5 s; then they go."""
    create_topic(cluster.bootstrap, topic_name, config={"retention.ms": "60000"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 1})
    # The batch coordinator starts with the cluster's first diskless commit (another
    # topic's here): only then are there retention checks to wait for.
    create_topic(cluster.bootstrap, f"{topic_name}-first")
    producer.produce(f"{topic_name}-first", b"first")
    assert producer.flush(30) == 0
    # Right after a retention check, so the next one is RETENTION_CHECK_S away.
    runs = retention_runs(cluster)
    wait_until(lambda: retention_runs(cluster) > runs, 2 * RETENTION_CHECK_S, 0.1)
    checked_at = time.monotonic()
    an_hour_ago_ms = int(time.time() * 1000) - 3_600_000
    for i in range(10):
        producer.produce(topic_name, f"old-{i}".encode(), partition=0, timestamp=an_hour_ago_ms)
    assert producer.flush(30) == 0

    # Ten housekeeping runs later (the old schedule removed them within one), still there,
    # unless a retention check came meanwhile (a machine slow enough to take 10 s for this).
    produced_runs = retention_runs(cluster)
    time.sleep(max(0.0, checked_at + RETENTION_CHECK_S / 2 - time.monotonic()))
    listed = offsets(cluster.bootstrap, topic_name)
    if retention_runs(cluster) == produced_runs:
        assert listed == (0, 10)
    wait_until(lambda: offsets(cluster.bootstrap, topic_name) == (10, 10),
               2 * RETENTION_CHECK_S, 0.2)


@pytest.mark.parametrize("mode, message", [
    ("diskless", "--s3-endpoint"),
    ("Diskless", "'Diskless' is not one of classic, active-tiered, diskless"),
])
def test_diskless_topic_without_object_store_or_unknown_mode_is_refused(
        broker_factory, topic_name, mode, message):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.create_topics([NewTopic(topic_name, 1, 1,
                                           config={"kipper.storage.mode": mode})])[topic_name]
    with pytest.raises(KafkaException) as refused:
        future.result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert message in refused.value.args[0].str()
