"""Claim 15 of the KIP threads (digest §6): a broker's local disk is a disposable cache.

A broker of a 3-broker cluster is killed with SIGKILL and its whole data directory deleted —
what an operator gets from a replaced disk or instance: the node keeps its identity and
configuration (node id, rack, listeners, controller, object-store settings: the command line
and environment, which live outside the data directory) and nothing else. Restarted on an
empty directory, it serves every acknowledged record, in order and once, to consumers that
bootstrap from it alone, and takes new idempotent produce. Every storage mode has a topic in
the same cluster (a cluster start is most of this test): diskless partitions are served from
the WAL objects and the batch coordinator's state (restored from its checkpoint and the
log after it), the replicated modes' replicas are fetched again from their leaders, shared
partitions reopen from their streams.
"""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey

from support.clients import consume_all
from support.raw import call, connect, entity
from support.processes import BrokerProcess, Cluster
from support.storage_modes import MODES
from support.topics import create_topic, partition_metadata
from support.wait import wait_until

RECORDS_BEFORE = 300  # produced through the broker before its disk is wiped
RECORDS_WHILE_DOWN = 100  # through the others while it is down: a tail it never saw
RECORDS_AFTER = 100  # through it once it is back


@pytest.fixture
def cluster(tmp_path, s3_endpoint):
    cluster = Cluster(tmp_path, s3=s3_endpoint, broker_args=["--metrics-listener", "127.0.0.1:0"],
                      broker_env={
                          # Checkpoints every few records: the coordinator's log no longer
                          # starts at 0, so the wiped broker must restore a checkpoint.
                          "KIPPER_DISKLESS_COORDINATOR_CHECKPOINT_INTERVAL_RECORDS": "15",
                          "KIPPER_DISKLESS_APPEND_COMMIT_INTERVAL_MS": "20"})
    yield cluster.start()
    cluster.stop()


def az(broker: BrokerProcess) -> str:
    return f"az{broker.node_id + 1}"


def produce(broker: BrokerProcess | str, topic: str, values: list[bytes],
            client_az: str) -> list[tuple[int, bytes]]:
    """An idempotent acks=all producer (its own producer id) through ``broker``: the (offset,
    value) of every acknowledged record. Flushed every ten records: many batches."""
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"writer az={client_az}",
                         "enable.idempotence": True, "acks": "all", "linger.ms": 0})
    acked: list[tuple[int, bytes]] = []
    errors: list = []

    def delivered(error, message) -> None:
        if error is None:
            acked.append((message.offset(), message.value()))
        else:
            errors.append(error)

    for i, value in enumerate(values):
        producer.produce(topic, value, partition=0, on_delivery=delivered)
        if i % 10 == 9:
            producer.flush(30)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    return acked


def read_through(broker: BrokerProcess, topic: str, expected: int) -> list[bytes]:
    """Partition 0 read by a consumer that bootstraps from ``broker`` alone and sits in its
    AZ (diskless: metadata names it as the partition's broker; replicated modes: KIP-392
    sends the fetches to it as the in-AZ replica)."""
    return consume_all(broker.bootstrap, topic, expected, timeout=90, config={
        "client.id": f"reader;az={az(broker)}", "client.rack": az(broker)})


def caught_up(cluster: Cluster, broker: BrokerProcess, topic: str) -> bool:
    """The broker is a replica in the ISR again (diskless: has no replicas to be in)."""
    info = partition_metadata(cluster.bootstrap, topic, 0)
    return info is not None and (broker.node_id in info.isrs or broker.node_id not in info.replicas)


def init_producer_id(broker: BrokerProcess) -> int:
    """The producer id ``broker`` hands an idempotent producer (InitProducerId v4)."""
    with connect(broker) as sock:
        response = call(sock, ApiKey.INIT_PRODUCER_ID, 4, entity(
            ApiKey.INIT_PRODUCER_ID, 4, "InitProducerIdRequest", transactional_id=None,
            transaction_timeout=60_000, producer_id=-1, producer_epoch=-1))
    assert response.error_code == ErrorCode.none, response.error_code
    return response.producer_id


def coordinator_state(broker: BrokerProcess) -> dict:
    return broker.metrics_json()["diskless"]["coordinator"]


def object_gets(broker: BrokerProcess) -> int:
    return sum(row["requests"] for row in broker.metrics_json()["objectstore"]["requests"]
               if row["operation"] == "GetObject")


@pytest.mark.system
def test_a_wiped_broker_serves_every_acknowledged_record_again(cluster, topic_name):
    topics = {mode: f"{topic_name}-{mode}" for mode in MODES}
    for mode, topic in topics.items():
        create_topic(cluster.bootstrap, topic, 1, 3, config={"kipper.storage.mode": mode},
                     in_sync=mode != "diskless")
    # The first diskless commit creates the batch coordinator's log (on all three brokers):
    # the broker to wipe is one that does not lead it.
    first = produce(cluster.bootstrap, topics["diskless"], [b"first"], "az1")
    coordinator = cluster.leader_of("__diskless-metadata")
    wiped = next(b for b in cluster.brokers if b.node_id != coordinator)
    others = [b for b in cluster.brokers if b is not wiped]

    acked = {mode: produce(wiped, topic, [f"before-{i}".encode() for i in range(RECORDS_BEFORE)],
                           az(wiped))
             for mode, topic in topics.items()}
    acked["diskless"] += first
    # Two checkpoints or more: the coordinator's log no longer starts at 0 on any replica, so
    # the wiped broker cannot replay it from the start.
    wait_until(lambda: all(coordinator_state(b)["metadata_log_start_offset"] > 0
                           for b in cluster.brokers), timeout=60, interval=0.5)
    last_id_before = init_producer_id(wiped)
    wiped.kill()
    shutil.rmtree(wiped.data_dir)
    survivors = ",".join(b.bootstrap for b in others)
    for mode, topic in topics.items():
        acked[mode] += produce(survivors, topic, [f"down-{i}".encode()
                                                  for i in range(RECORDS_WHILE_DOWN)], az(others[0]))
    wiped.start()
    restarted_at = time.monotonic()
    # Producer ids never repeat: one handed out again would continue (or be taken for a
    # retry of) the sequence of a producer that already wrote with it.
    assert init_producer_id(wiped) > last_id_before

    gets_before_reads = object_gets(wiped)
    for mode, topic in topics.items():
        wait_until(lambda: caught_up(cluster, wiped, topic), timeout=60, interval=0.5)
        expected = [value for _, value in sorted(acked[mode])]
        assert read_through(wiped, topic, len(expected)) == expected, mode
        print(f"{mode}: {len(expected)} records read through the wiped broker "
              f"{time.monotonic() - restarted_at:.1f} s after its restart (modes in turn)")
        after = produce(wiped, topic, [f"after-{i}".encode() for i in range(RECORDS_AFTER)],
                        az(wiped))
        expected += [value for _, value in sorted(after)]
        assert read_through(wiped, topic, len(expected)) == expected, mode
    # The diskless records came from the WAL objects: nothing of them was left on the broker.
    assert object_gets(wiped) > gets_before_reads
    restored = coordinator_state(wiped)
    assert restored["restored_checkpoint_offset"] >= 0
    print(f"object GETs of the wiped broker after its restart: "
          f"{object_gets(wiped) - gets_before_reads}; batch coordinator state restored from "
          f"the checkpoint at {restored['restored_checkpoint_offset']} in "
          f"{restored['restore_seconds']:.3f} s")
