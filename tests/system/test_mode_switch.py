"""Live switches of kipper.storage.mode (docs/mode-switch.md) with real clients producing and
consuming through them: an idempotent confluent-kafka producer (acks=all), a confluent-kafka
consumer-group member, and kafka-python reading the whole partition afterwards. Switches are
asked for with confluent-kafka's IncrementalAlterConfigs and kafka-python's AlterConfigs."""

from __future__ import annotations

import time

import pytest

from support.clients import AckedProducer
from support.mode_switch import (
    GroupReader,
    assert_contiguous_once_in_order,
    read_all_kafka_python,
    redelivered_once,
    start_switch,
    switch,
    wait_switched,
)
from support.processes import Cluster
from support.topics import create_topic
from support.wait import wait_until
from support.transactions import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    read_confluent_kafka,
    read_kafka_python,
)

from replication.cluster_metadata import DISKLESS_METADATA_TOPIC

# The round trip from each mode: there and back again.
ROUND_TRIPS = [("classic", "diskless"), ("diskless", "classic")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_endpoint):
    cluster = Cluster(tmp_path_factory.mktemp("mode-switch"), s3=s3_endpoint,
                      broker_args=["--metrics-listener", "127.0.0.1:0"]).start()
    yield cluster
    cluster.stop()


def _start_clients(cluster: Cluster, topic: str) -> tuple[AckedProducer, GroupReader]:
    writer = AckedProducer(cluster.bootstrap, topic, "az1")
    reader = GroupReader(cluster.bootstrap, topic, f"group-{topic}")
    writer.start()
    reader.start()
    return writer, reader


def _finish(cluster: Cluster, topic: str, writer: AckedProducer, reader: GroupReader,
            rebalanced: bool = False) -> None:
    """``rebalanced``: nodes were killed, so the group member may have been given records
    again (redelivered_once); otherwise it read each once."""
    writer.finish()
    acked = len(writer.acked)
    reader.read_up_to(acked)
    reader.finish()
    assert not writer.errors, f"the producer saw errors: {writer.errors[:3]}"
    assert_contiguous_once_in_order(
        writer.acked, redelivered_once(reader.read) if rebalanced else reader.read)
    assert_contiguous_once_in_order(writer.acked,
                                    read_all_kafka_python(cluster.bootstrap, topic, acked))


@pytest.mark.parametrize(("first", "second"), ROUND_TRIPS, ids=[f"{a}-{b}-{a}" for a, b in ROUND_TRIPS])
def test_round_trip_under_load(cluster, topic_name, first, second):
    create_topic(cluster.bootstrap, topic_name, replication_factor=3,
                 config={"kipper.storage.mode": first}, in_sync=True)
    writer, reader = _start_clients(cluster, topic_name)
    reader.read_up_to(200)
    switch(cluster.bootstrap, topic_name, second)
    count = len(writer.acked)
    reader.read_up_to(count + 200)
    switch(cluster.bootstrap, topic_name, first, legacy=True)  # AlterConfigs, by kafka-python
    count = len(writer.acked)
    reader.read_up_to(count + 200)
    _finish(cluster, topic_name, writer, reader)


def test_leader_killed_mid_switch(cluster, topic_name):
    """kill -9 of a classic leader draining its partition for the switch to diskless: the
    next leader seals at the same boundary and completes the switch."""
    create_topic(cluster.bootstrap, topic_name, replication_factor=3,
                 config={"kipper.storage.mode": "classic"}, in_sync=True)
    bootstrap = cluster.bootstrap
    writer, reader = _start_clients(cluster, topic_name)
    reader.read_up_to(200)
    leader = cluster.brokers[cluster.leader_of(topic_name)]
    follower = next(b for b in cluster.brokers if b is not leader)
    # A dead follower keeps the leader's high watermark below its log end until it is fenced
    # out of the ISR (2 s): the leader is killed while it waits to seal.
    follower.kill()
    start_switch(bootstrap, topic_name, "diskless")
    time.sleep(0.5)
    leader.kill()
    time.sleep(3)
    leader.start()
    follower.start()
    wait_switched(bootstrap, topic_name, "diskless", timeout=90)
    count = len(writer.acked)
    reader.read_up_to(count + 200)
    switch(bootstrap, topic_name, "classic")
    reader.read_up_to(len(writer.acked) + 200)
    _finish(cluster, topic_name, writer, reader, rebalanced=True)


@pytest.mark.parametrize(("first", "second"), ROUND_TRIPS, ids=[f"{a}-{b}-{a}" for a, b in ROUND_TRIPS])
def test_controller_killed_mid_switch(cluster, topic_name, first, second):
    """kill -9 of the controller right after it sealed the partitions, each way: the leader's
    span waits for the restarted controller, which has the sealed state from its log."""
    create_topic(cluster.bootstrap, topic_name, replication_factor=3,
                 config={"kipper.storage.mode": first}, in_sync=True)
    bootstrap = cluster.bootstrap
    writer, reader = _start_clients(cluster, topic_name)
    reader.read_up_to(200)
    for mode in (second, first):
        start_switch(bootstrap, topic_name, mode)
        cluster.controller.kill()
        time.sleep(1)
        cluster.controller.start()
        wait_switched(bootstrap, topic_name, mode, timeout=90)
        reader.read_up_to(len(writer.acked) + 200)
    _finish(cluster, topic_name, writer, reader, rebalanced=True)


@pytest.mark.parametrize(("first", "second"), ROUND_TRIPS, ids=[f"{a}-{b}-{a}" for a, b in ROUND_TRIPS])
def test_transactions_open_across_the_boundary(cluster, topic_name, first, second):
    """A transaction open while its partition switches goes on in the new span: committed,
    its records on both sides are read by read_committed consumers; aborted, on neither."""
    from confluent_kafka import Producer
    create_topic(cluster.bootstrap, topic_name, replication_factor=3,
                 config={"kipper.storage.mode": first}, in_sync=True)
    bootstrap = cluster.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                         "transactional.id": f"txn-{topic_name}"})
    producer.init_transactions(60)

    def write(tag: str, values: range) -> None:
        for i in values:
            producer.produce(topic_name, f"{tag}-{i}".encode(), partition=0)
        assert producer.flush(60) == 0

    committed: list[bytes] = []
    for tag, mode, commit in (("c0", second, True), ("a1", first, False), ("c2", second, True)):
        producer.begin_transaction()
        write(tag, range(5))
        switch(bootstrap, topic_name, mode)
        write(tag, range(5, 10))
        if commit:
            producer.commit_transaction(60)
            committed += [f"{tag}-{i}".encode() for i in range(10)]
        else:
            producer.abort_transaction(60)
    assert read_confluent_kafka(bootstrap, topic_name, READ_COMMITTED, len(committed)) == committed
    assert read_kafka_python(bootstrap, topic_name, READ_COMMITTED, len(committed)) == committed
    assert len(read_confluent_kafka(bootstrap, topic_name, READ_UNCOMMITTED, 30)) == 30


def test_batch_coordinator_killed_mid_switch(cluster, topic_name):
    """kill -9 of the batch coordinator's leader as a diskless partition is sealed and as one
    is opened: SealLog and OpenLog are records of its replicated log, retried on the next
    leader, which answers the same boundary."""
    create_topic(cluster.bootstrap, topic_name, replication_factor=3,
                 config={"kipper.storage.mode": "diskless"}, in_sync=True)
    bootstrap = cluster.bootstrap
    writer, reader = _start_clients(cluster, topic_name)
    reader.read_up_to(200)
    for mode in ("classic", "diskless"):
        coordinator = cluster.brokers[cluster.leader_of(DISKLESS_METADATA_TOPIC)]
        start_switch(bootstrap, topic_name, mode)
        coordinator.kill()
        time.sleep(3)
        coordinator.start()
        wait_switched(bootstrap, topic_name, mode, timeout=90)
        reader.read_up_to(len(writer.acked) + 200)
    _finish(cluster, topic_name, writer, reader, rebalanced=True)


def test_every_span_readable_after_the_leader_dies(cluster, topic_name):
    """After classic -> diskless -> classic, kill -9 of the leader: the next one (an in-sync
    replica) serves the first classic span from its own segments, the diskless span from the
    WAL objects and the last span; the killed broker, started again, rebuilds the chain from
    the metadata and serves it too once it leads."""
    create_topic(cluster.bootstrap, topic_name, replication_factor=3,
                 config={"kipper.storage.mode": "classic"}, in_sync=True)
    bootstrap = cluster.bootstrap
    writer = AckedProducer(bootstrap, topic_name, "az1")
    writer.start()
    for mode in ("diskless", "classic"):
        wait_until(lambda: len(writer.acked) > 300, 30)
        switch(bootstrap, topic_name, mode)
    wait_until(lambda: len(writer.acked) > 900, 30)
    writer.finish()
    acked = len(writer.acked)
    for _ in range(2):  # the leader dies, then the next one: the first is back by then
        leader = cluster.brokers[cluster.leader_of(topic_name)]
        leader.kill()
        cluster.leader_of(topic_name)  # a live one, named by the metadata
        assert_contiguous_once_in_order(writer.acked,
                                        read_all_kafka_python(cluster.bootstrap, topic_name, acked))
        leader.start()
        wait_until(lambda: len(cluster.isr_of(topic_name)) == 3, 60)
