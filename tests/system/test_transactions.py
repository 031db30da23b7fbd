"""Transactions as real clients see them, in every storage mode (support.storage_modes) and in
one transaction spanning a topic of each mode: confluent-kafka, kafka-python, aiokafka and
kafkajs transactional producers commit and abort; read_committed consumers read exactly the
committed records in order and never an aborted one, read_uncommitted ones read both; the last
stable offset (ListOffsets at read_committed) stops at an open transaction and moves on
commit, abort and the coordinator's abort of a transaction whose producer died; a producer
fenced by a newer one with its transactional id writes nothing that becomes visible.

Drivers and readers per client: support.transactions (kafkajs: tests/js/transactions.mjs)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from support.clients import consume_all
from support.topics import create_topic
from support.transactions import (
    CLIENTS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    OpenTransactionProcess,
    commit_abort_commit,
    end_offset_kafka_python,
    expected_reads,
    list_offset,
    transactional_client,
)
from support.wait import wait_until

# The errors a fenced producer may report: Kafka's two codes, or librdkafka's fatal _FENCED.
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
# Long enough for the two ListOffsets that see the transaction open to come first on a
# loaded machine (with 3 s the coordinator's abort came first once, the suite on 2 cores).
HANGING_TIMEOUT_MS = 6000


def transactional_id(topic: str) -> str:
    return f"txn-{topic}-{uuid.uuid4().hex[:6]}"


def create(storage_mode, topic: str) -> None:
    create_topic(storage_mode.bootstrap, topic, replication_factor=storage_mode.replication_factor)


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_and_abort(storage_mode, client, topic_name, request):
    """The client's consumers at both isolation levels, and confluent-kafka's read_committed
    one, read what the client's transactions committed and wrote."""
    driver = transactional_client(client, request)
    create(storage_mode, topic_name)
    plan = commit_abort_commit([topic_name])
    driver.produce(storage_mode.bootstrap, transactional_id(topic_name), plan)

    expected = expected_reads(plan, topic_name)
    assert driver.read_both(storage_mode.bootstrap, topic_name, expected) == expected
    assert consume_all(storage_mode.bootstrap, topic_name, len(expected[READ_COMMITTED]),
                       config={"isolation.level": READ_COMMITTED}) == expected[READ_COMMITTED]


SPANNING_TOPICS = {"classic": 3, "active-tiered": 3, "diskless": 1}  # mode: replication factor


@pytest.mark.parametrize("client", CLIENTS)
def test_one_transaction_spans_every_mode(client, diskless_cluster, topic_name, request):
    """Each transaction writes to a classic, an active-tiered and a diskless topic of one
    cluster: every topic's consumers see the same outcome."""
    driver = transactional_client(client, request)
    topics = {mode: f"{topic_name}-{mode}" for mode in SPANNING_TOPICS}
    for mode, topic in topics.items():
        create_topic(diskless_cluster.bootstrap, topic, replication_factor=SPANNING_TOPICS[mode],
                     config={"kipper.storage.mode": mode})
    plan = commit_abort_commit(list(topics.values()))
    driver.produce(diskless_cluster.bootstrap, transactional_id(topic_name), plan)

    for mode, topic in topics.items():
        expected = expected_reads(plan, topic)
        assert driver.read_both(diskless_cluster.bootstrap, topic, expected) == expected, mode


def stable_and_high(bootstrap: str, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0, as ListOffsets answers."""
    return list_offset(bootstrap, topic, READ_COMMITTED), list_offset(bootstrap, topic,
                                                                      READ_UNCOMMITTED)


def wait_stable(bootstrap: str, topic: str, timeout: float = 30) -> int:
    """The last stable offset once it has caught up with the high watermark (the coordinator
    writes the markers after it answered EndTxn)."""
    def caught_up() -> int | None:
        stable, high = stable_and_high(bootstrap, topic)
        return stable if stable == high else None
    return wait_until(caught_up, timeout, interval=0.1)


def test_last_stable_offset_follows_the_transaction(storage_mode, topic_name):
    bootstrap = storage_mode.bootstrap
    create(storage_mode, topic_name)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                         "transactional.id": transactional_id(topic_name)})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic_name, b"before", partition=0)
    producer.commit_transaction(60)
    start = wait_stable(bootstrap, topic_name)
    assert start == 2  # the record and its commit marker

    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic_name, b"open-%d" % i, partition=0)
    assert producer.flush(60) == 0
    assert stable_and_high(bootstrap, topic_name) == (start, start + 3)
    assert end_offset_kafka_python(bootstrap, topic_name, READ_COMMITTED) == start
    assert end_offset_kafka_python(bootstrap, topic_name, READ_UNCOMMITTED) == start + 3
    assert consume_all(bootstrap, topic_name, 1,
                       config={"isolation.level": READ_COMMITTED}) == [b"before"]
    producer.commit_transaction(60)
    assert wait_stable(bootstrap, topic_name) == start + 4

    producer.begin_transaction()
    producer.produce(topic_name, b"aborted", partition=0)
    assert producer.flush(60) == 0
    assert stable_and_high(bootstrap, topic_name) == (start + 4, start + 5)
    producer.abort_transaction(60)
    assert wait_stable(bootstrap, topic_name) == start + 6
    assert consume_all(bootstrap, topic_name, 4, config={"isolation.level": READ_COMMITTED}) == [
        b"before", b"open-0", b"open-1", b"open-2"]


def test_hanging_transaction_is_aborted_after_its_timeout(storage_mode, topic_name):
    """A producer killed with its transaction open holds the LSO back until the coordinator
    aborts the transaction, transaction.timeout.ms after it began."""
    bootstrap = storage_mode.bootstrap
    create(storage_mode, topic_name)
    values = [b"hanging-%d" % i for i in range(3)]
    hanging = OpenTransactionProcess(bootstrap, transactional_id(topic_name), topic_name, values,
                                     HANGING_TIMEOUT_MS)
    opened_at = time.monotonic()
    try:
        assert stable_and_high(bootstrap, topic_name) == (0, 3)
    finally:
        hanging.kill()
    assert wait_stable(bootstrap, topic_name, timeout=60) == 4  # the records and the abort
    print(f"{storage_mode.name}: the hanging transaction was aborted "
          f"{time.monotonic() - opened_at:.1f} s after it opened "
          f"(transaction.timeout.ms {HANGING_TIMEOUT_MS})")
    assert consume_all(bootstrap, topic_name, 0, config={"isolation.level": READ_COMMITTED}) == []
    assert consume_all(bootstrap, topic_name, 3,
                       config={"isolation.level": READ_UNCOMMITTED}) == values


def test_zombie_producer_is_fenced(storage_mode, topic_name):
    """A second producer with the same transactional id fences the first: the first's open
    transaction is aborted, and what it sends afterwards is refused and never visible."""
    bootstrap = storage_mode.bootstrap
    create(storage_mode, topic_name)
    tid = transactional_id(topic_name)
    config = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 2}
    zombie = Producer(config)
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce(topic_name, b"zombie-before", partition=0)
    assert zombie.flush(60) == 0

    successor = Producer(config)
    successor.init_transactions(60)

    with pytest.raises(KafkaException) as fenced:  # from the flush or from the commit
        zombie.produce(topic_name, b"zombie-after", partition=0)
        zombie.flush(30)
        zombie.commit_transaction(30)
    assert fenced.value.args[0].code() in FENCED, fenced.value

    successor.begin_transaction()
    successor.produce(topic_name, b"successor", partition=0)
    successor.commit_transaction(60)
    assert consume_all(bootstrap, topic_name, 1,
                       config={"isolation.level": READ_COMMITTED}) == [b"successor"]
    uncommitted = consume_all(bootstrap, topic_name, 2, config={"isolation.level": READ_UNCOMMITTED})
    assert b"zombie-after" not in uncommitted, uncommitted
