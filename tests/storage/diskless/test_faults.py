"""Diskless durability under kill -9 and object-store outages: no acknowledged record is
lost or duplicated, no offset is assigned twice, orphan WAL objects are collected."""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import KafkaError, Producer

from support.clients import AckedProducer, assert_acked_exactly_once, produce_once
from support.diskless import FAST_HOUSEKEEPING, DisklessCluster
from support.topics import create_topic
from support.wait import wait_until

@pytest.fixture
def cluster(tmp_path, s3_endpoint):
    cluster = DisklessCluster(tmp_path, s3_endpoint, broker_env=FAST_HOUSEKEEPING).start()
    yield cluster
    for broker in cluster.brokers:
        if broker.proc is not None and broker.proc.poll() is None:
            os.kill(broker.proc.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM
    cluster.stop()


def coordinator_and_other(cluster: DisklessCluster):
    leader = cluster.leader_of("__diskless-metadata")
    coordinator = next(b for b in cluster.brokers if b.node_id == leader)
    return coordinator, [b for b in cluster.brokers if b is not coordinator]


def test_broker_killed_between_upload_and_commit(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name)
    first = Producer({"bootstrap.servers": cluster.bootstrap})
    first.produce(topic_name, b"first", partition=0)
    assert first.flush(30) == 0  # the first commit creates the coordinator's log
    coordinator, others = coordinator_and_other(cluster)
    uploader = others[0]
    writer = AckedProducer(cluster.bootstrap, topic_name, f"az{uploader.node_id + 1}")
    writer.start()
    wait_until(lambda: len(writer.acked) >= 200, 30)
    # Freeze the coordinator: the uploader keeps uploading WAL objects whose commit calls
    # wait in the coordinator's socket; then both die, so those objects are never committed.
    os.kill(coordinator.proc.pid, signal.SIGSTOP)
    time.sleep(1.0)
    uploader.kill()
    coordinator.kill()
    orphans = cluster.wal_keys() - cluster.committed_keys()
    coordinator.start()
    uploader.start()
    time.sleep(3)
    writer.finish()
    assert_acked_exactly_once(cluster.bootstrap, topic_name, writer)

    print(f"{len(orphans)} WAL objects were uploaded but never committed")
    assert orphans
    wait_until(lambda: not (orphans & cluster.wal_keys()), 60, 0.5)
    # Garbage collection never touches an object that holds a live batch.
    live = {key for (key,) in cluster.coordinator_rows("SELECT DISTINCT object_key FROM batches")}
    assert live <= cluster.wal_keys()


def test_coordinator_killed_another_takes_over(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name)
    writer = AckedProducer(cluster.bootstrap, topic_name, "az1")
    writer.start()
    wait_until(lambda: len(writer.acked) >= 200, 30)
    coordinator, _ = coordinator_and_other(cluster)
    killed_at = time.monotonic()
    coordinator.kill()
    wait_until(lambda: writer.acked[-1][0] > killed_at + 0.5, 60, 0.1)
    resumed_at = min(t for t, _, _ in writer.acked if t > killed_at + 0.01)
    new_leader = cluster.leader_of("__diskless-metadata")
    print(f"coordinator {coordinator.node_id} killed: broker {new_leader} took over, produce "
          f"acks resumed after {resumed_at - killed_at:.2f} s")
    assert new_leader != coordinator.node_id
    coordinator.start()
    time.sleep(1)
    writer.finish()
    assert_acked_exactly_once(cluster.bootstrap, topic_name, writer)


def test_object_store_outage(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name)
    writer = AckedProducer(cluster.bootstrap, topic_name, "az1")
    writer.start()
    wait_until(lambda: len(writer.acked) >= 200, 30)
    for broker in cluster.brokers:
        broker.s3_fault({"fault": "outage", "for_s": 4, "mode": "fail"})

    # A producer that does not retry sees the failure as a retriable error, in time.
    answered_s, error = produce_once(cluster.bootstrap, topic_name, 30_000)
    print(f"produce during an S3 outage failed after {answered_s:.2f} s with {error}")
    # KAFKA_STORAGE_ERROR is retriable in the Kafka protocol: the writer above retries
    # through the outage without reporting an error.
    assert error is not None and error.code() == KafkaError.KAFKA_STORAGE_ERROR
    assert answered_s < 30

    acked_before = len(writer.acked)
    wait_until(lambda: len(writer.acked) > acked_before + 200, 60, 0.2)  # resumes afterwards
    writer.finish()
    assert not writer.errors, writer.errors[:5]
    assert_acked_exactly_once(cluster.bootstrap, topic_name, writer)
